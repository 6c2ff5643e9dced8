"""Private numba kernels. Call them only through the checked wrappers in
the public modules (``ftrl_ps.ftrl``, ``ftrl_ps.libsvm``, ``ftrl_ps.store``);
the kernels assume their inputs were validated."""
