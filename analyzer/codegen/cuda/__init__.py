"""Render kernel plans as CUDA C++ (`napkin kernel --backend cuda`) and write the Python loader.

The CUDA kernels realise the same plans as analyzer.codegen.triton, walked the same way
(analyzer.codegen.render): one block of the grid owns one index of every grid axis and one tile of every
grouped axis; per-axis sizes and strides are arguments; the arrays without the streamed axis are loaded
once (the head); the loop walks the streamed axis a chunk at a time, interior chunks without masks and
then the edge chunks, masked (under a causal mask with block skipping, only up to the diagonal); masked
slots get the neutral element of what consumes them; the online softmax runs in base 2 with the running
maximum guarded (`m_use`) for rows that have seen nothing yet.

    variants.py    each configuration as CUDA can run it: clamped to the renderer's shapes and to the
                   GPU's limits (limits.py: shared memory per block, registers per thread, threads per
                   block, from the GPU profile)
    ids.py         identifiers claimed from the file's and each kernel's C++ scope
    prelude.py     the fixed C++ of every .cu (prelude.cuh) and the error codes
    common.py      what both renderers share: the spelling of the elementwise ops, names, block indices
    mma.py         a kernel with contractions, on the tensor cores (fragments.py: its register tiles and
                   the mma; host.py: its configuration structs, launcher and extern "C" entry)
    point.py       a kernel without contractions: a loop over its elements
    source.py      the .cu file: header, prelude, kernels
    loader.py      the Python loader beside it (loader_template.py: its fixed text)
"""

from __future__ import annotations

from analyzer.codegen.cuda.common import RENDERED, check_renderable
from analyzer.codegen.cuda.loader import loader_text
from analyzer.codegen.cuda.source import as_run, cuda_source
from analyzer.codegen.cuda.variants import Variant


def cuda_files(g) -> tuple[str, dict[str, str]]:
    """The .cu source of generated diagram `g` (analyzer.codegen.generator.KernelFile) and its Python
    loader ({".py": text})."""
    source, writers = cuda_source(g)
    return source, {".py": loader_text(g, writers)}


__all__ = ["RENDERED", "Variant", "as_run", "check_renderable", "cuda_files", "cuda_source", "loader_text"]
