from pathlib import Path

import pytest

from ferry.protocol.errors import InvalidParameterError, SubscriptionGroupNotExistError
from ferry.remoting.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupTable


def test_group_is_created_on_first_use_and_kept_on_disk(tmp_path: Path) -> None:
    table = SubscriptionGroupTable(tmp_path, auto_create=True)
    created = table.ensure("g1")
    assert created.group_name == "g1"
    assert created.retry_max_times == 16

    again = SubscriptionGroupTable(tmp_path, auto_create=False)
    again.load()
    assert again.find("g1") == created


def test_unknown_group_is_refused_without_auto_create(tmp_path: Path) -> None:
    table = SubscriptionGroupTable(tmp_path, auto_create=False)
    with pytest.raises(SubscriptionGroupNotExistError):
        table.ensure("g1")
    table.put(SubscriptionGroupConfig(group_name="g1"))
    assert table.ensure("g1").group_name == "g1"


def test_invalid_group_name_is_never_created(tmp_path: Path) -> None:
    table = SubscriptionGroupTable(tmp_path, auto_create=True)
    with pytest.raises(InvalidParameterError):
        table.ensure("bad group")
    assert len(table) == 0
