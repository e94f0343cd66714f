"""The PyTorch user's side of the package, gathered for __init__: text in (prepare), a torch
module in and weights out (from_torch, Session.state_dict), the CLI's loop (train), plots,
progress and logging."""
from .logs import log_to_python  # noqa: F401
from .plot import plot  # noqa: F401
from .prepare import prepare  # noqa: F401
from .progress import Progress  # noqa: F401
from .sample import sample  # noqa: F401
from .torch_export import from_torch  # noqa: F401
from .torch_export import state_dict as _state_dict  # noqa: F401
from .train import train  # noqa: F401
