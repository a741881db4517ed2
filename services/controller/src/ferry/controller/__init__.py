"""The controller: broker groups' state on etcd, master election (issue 26)."""
