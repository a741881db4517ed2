"""Authentication and authorization of every request a service serves (issue 27).

config: the broker.conf keys; guard: the check run before every handler; permissions: what
each request type needs. The users and their policies are ferry.runtime.acl's.
"""
