"""Private numba kernels. Call them only through the checked wrappers in
the public modules (``ftrl_ps.core.ftrl``, ``ftrl_ps.data.libsvm``, ``ftrl_ps.ps.store``);
the kernels assume their inputs were validated."""

#: set by the command line before any kernel module is imported: numba then
#: loads without its optional BLAS support (see ``_config.skip_blas_probe``)
SKIP_BLAS_PROBE = False
