from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import (
    FerryError,
    SystemBusyError,
    TopicNotExistError,
    error_for,
    registered_codes,
)


def test_each_code_maps_to_its_exception() -> None:
    err = error_for(ResponseCode.TOPIC_NOT_EXIST, "No route info of this topic: T")
    assert isinstance(err, TopicNotExistError)
    assert err.retriable
    assert "TOPIC_NOT_EXIST" in str(err)


def test_retriable_flag_from_the_wire_wins() -> None:
    assert error_for(ResponseCode.SYSTEM_BUSY, "busy", retriable=False).retriable is False
    assert isinstance(error_for(ResponseCode.SYSTEM_BUSY, "busy"), SystemBusyError)


def test_unknown_code_is_a_plain_ferry_error_keeping_the_code() -> None:
    err = error_for(4242, "from the future")
    assert type(err) is FerryError
    assert err.code == 4242


def test_registry_has_one_class_per_code() -> None:
    reg = registered_codes()
    assert len(set(reg.values())) == len(reg)
    assert all(cls.code == code for code, cls in reg.items())
