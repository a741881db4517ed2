"""Test support shared by every suite of the repository and by bench/.

It lives in ferry.runtime because the launcher does, and because ferry.runtime is the one
package that the SDK's tests, the services' tests, tests/ and bench/ may all import: none of
them may import another's test folder (the SDK's tests must run without tests/). No service
imports it.

- cluster: a name server and one broker group on a directory (Cluster, start_cluster,
  running_cluster), small CommitLog segments so that rolling happens in tests;
- store: a broker-store process alone on free ports (start_store);
- small_disk: a small tmpfs for tests whose disk must really fill up;
- pytest_support: what needs pytest (wait_for, RawClient, the module-wide cluster fixture,
  the tmpfs fixture). The modules above do not import pytest, so bench/ uses them too.
"""
