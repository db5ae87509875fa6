"""gpuprep: GPU node checks, tuning and burn-in."""
__version__ = "0.1.0"
