"""Names the kernel's processes and the rest of the grader share, with nothing to import: a leaf
module (``grader/ledger/course.py`` reads them without loading the sandbox)."""

#: One BLAS/OpenMP thread per process: N kernels (or nbgrader processes) on N cores.
SINGLE_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
