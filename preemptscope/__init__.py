"""preemptscope: tells people running vLLM when their deployment is over capacity, and proves it."""

from preemptscope.errors import InputError, PreemptscopeError

__version__ = "0.1.0"

__all__ = ["InputError", "PreemptscopeError", "__version__"]
