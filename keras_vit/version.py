"""The package's version (`keras_vit.__version__`; setup.cfg reads it)."""

__version__ = "0.1.0"
