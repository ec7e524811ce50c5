// replaced by the kernels work
