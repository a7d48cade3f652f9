"""Generated Triton kernels run on the CPU through Triton's interpreter (TRITON_INTERPRET=1)."""

import os

# setdefault: the gpu-marked tests here run where TRITON_INTERPRET=0 is set (README's command), with
# Triton's compiler; under the interpreter they skip
os.environ.setdefault("TRITON_INTERPRET", "1")
