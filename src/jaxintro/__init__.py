"""jaxintro: the lesson 'Introduction to JAX', runnable and tested."""

__version__ = "0.1.0"
