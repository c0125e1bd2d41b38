"""Stand-in for safetensors (CPU dry runs only)."""
__version__ = "0-standin"
