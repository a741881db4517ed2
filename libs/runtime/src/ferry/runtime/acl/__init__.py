"""Users and ACLs (RocketMQ 5.3's ACL 2.0): the model (model), the checks a request guard
asks (AuthDb), the changes admin commands make (edits) and the durable file (AuthFile)."""

from ferry.runtime.acl.db import AuthDb
from ferry.runtime.acl.model import Action, Resource
from ferry.runtime.acl.store import AuthFile

__all__ = ["Action", "AuthDb", "AuthFile", "Resource"]
