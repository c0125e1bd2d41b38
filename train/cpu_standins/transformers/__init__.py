"""Stand-in for transformers (CPU dry runs only): see train/cpu_standins/README.md."""
__version__ = "0-standin"

from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM  # noqa: E402,F401
