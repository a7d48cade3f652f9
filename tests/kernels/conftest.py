"""Generated Triton kernels run on the CPU through Triton's interpreter (TRITON_INTERPRET=1)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
