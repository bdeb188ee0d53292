"""The owner thread's binding: the flow-bound file and its orchestrator line."""

from crw.binding.owner import BindResult, bind_owner, close_owner

__all__ = ["BindResult", "bind_owner", "close_owner"]
