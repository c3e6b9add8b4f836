# expect: not_float32
jax.config.update("jax_enable_x64", True)  # every array defaults to float64 from here on
