"""Typed errors with their wire code, and the registry from code to exception class.

A service answers every failure with ErrorReply(code, message, retriable); the SDK turns it back
into the exception registered for that code (FerryError for codes it does not know).
"""

from __future__ import annotations

from typing import ClassVar

from ferry.protocol.codes import ResponseCode


class FerryError(Exception):
    """Base of every error that crosses the wire."""

    code: int = ResponseCode.SYSTEM_ERROR
    default_retriable: ClassVar[bool] = False

    def __init__(
        self, message: str = "", *, retriable: bool | None = None, code: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retriable = self.default_retriable if retriable is None else retriable
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        try:
            name = ResponseCode(self.code).name
        except ValueError:
            name = str(self.code)
        return f"[{name}] {self.message}"


_REGISTRY: dict[int, type[FerryError]] = {}


def _register(cls: type[FerryError]) -> type[FerryError]:
    _REGISTRY[cls.code] = cls
    return cls


@_register
class BrokerSystemError(FerryError):
    code = ResponseCode.SYSTEM_ERROR
    default_retriable = True


@_register
class SystemBusyError(FerryError):
    code = ResponseCode.SYSTEM_BUSY
    default_retriable = True


@_register
class RequestCodeNotSupportedError(FerryError):
    code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED


@_register
class MessageIllegalError(FerryError):
    code = ResponseCode.MESSAGE_ILLEGAL


@_register
class ServiceNotAvailableError(FerryError):
    code = ResponseCode.SERVICE_NOT_AVAILABLE
    default_retriable = True


@_register
class VersionNotSupportedError(FerryError):
    code = ResponseCode.VERSION_NOT_SUPPORTED


@_register
class NoPermissionError(FerryError):
    code = ResponseCode.NO_PERMISSION
    default_retriable = True


@_register
class TopicNotExistError(FerryError):
    code = ResponseCode.TOPIC_NOT_EXIST
    default_retriable = True


@_register
class TopicExistAlreadyError(FerryError):
    code = ResponseCode.TOPIC_EXIST_ALREADY


@_register
class QueryNotFoundError(FerryError):
    code = ResponseCode.QUERY_NOT_FOUND


@_register
class SubscriptionParseError(FerryError):
    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED


@_register
class SubscriptionGroupNotExistError(FerryError):
    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


@_register
class InvalidParameterError(FerryError):
    code = ResponseCode.INVALID_PARAMETER


@_register
class BrokerNotExistError(FerryError):
    code = ResponseCode.BROKER_NOT_EXIST
    default_retriable = True


@_register
class IllegalStateError(FerryError):
    """An operation at the wrong time, e.g. a client used before start() or after shutdown()."""

    code = ResponseCode.ILLEGAL_OPERATION


@_register
class GoAwayError(FerryError):
    code = ResponseCode.GO_AWAY
    default_retriable = True


@_register
class ConnectionFailedError(FerryError):
    """The peer cannot be reached: a local condition, said in plain words (str() is the
    message alone; `code` keeps RocketMQ's RPC_SEND_TO_CHANNEL_FAILED for programs)."""

    code = ResponseCode.RPC_SEND_TO_CHANNEL_FAILED
    default_retriable = True

    def __str__(self) -> str:
        return self.message


@_register
class RequestTimeoutError(FerryError):
    code = ResponseCode.RPC_TIME_OUT
    default_retriable = True


class ReplyTimeoutError(RequestTimeoutError):
    """request/reply: no reply came within the request's timeout (RocketMQ's
    RequestTimeoutException). Raised by the SDK, never sent: its code is RPC_TIME_OUT's."""

    default_retriable = False


@_register
class DiskFullError(FerryError):
    """The broker refuses writes: its disk is above the hard limit. Another broker may take
    the message, so producers retry elsewhere."""

    code = ResponseCode.DISK_FULL
    default_retriable = True


@_register
class HaLogDivergedError(FerryError):
    """A slave's CommitLog does not match its master's (the master was replaced, or the slave
    ends where the master has no bytes): the master refuses to replicate rather than merge."""

    code = ResponseCode.HA_LOG_DIVERGED


@_register
class InSyncReplicasNotEnoughError(FerryError):
    """Controller mode, minInSyncReplicas: too few replicas of the group (its master included)
    are in sync, so a write is refused before it is stored. Retriable: the set grows back
    once a slave catches up."""

    code = ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH
    default_retriable = True


@_register
class InvalidReceiptHandleError(FerryError):
    """Pop consumption: the receipt handle is not one the broker holds in flight (unknown,
    acked already, replaced by a change of invisible time, or past its invisible time, when
    the message comes back to be received again)."""

    code = ResponseCode.INVALID_RECEIPT_HANDLE


# ---- the controller's (controller mode, issue 26) ----


@_register
class ControllerInvalidRequestError(FerryError):
    """A controller request that names no registered group or replica it could act on, or
    asks for something its state forbids (a sync state set without the master)."""

    code = ResponseCode.CONTROLLER_INVALID_REQUEST


@_register
class ControllerBrokerNotAliveError(FerryError):
    """The replica named (electMaster's target) has no live heartbeat."""

    code = ResponseCode.CONTROLLER_BROKER_NOT_ALIVE
    default_retriable = True


@_register
class ControllerNotLeaderError(FerryError):
    """This controller cannot reach etcd (down, slow, no quorum) and decides nothing: ask
    again, or another controller of controllerAddr."""

    code = ResponseCode.CONTROLLER_NOT_LEADER
    default_retriable = True


@_register
class ControllerMetadataNotExistError(FerryError):
    """The controller holds nothing for that broker group or replica."""

    code = ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST


@_register
class ControllerInvalidCleanError(FerryError):
    """cleanBrokerMetadata refused: a replica still alive (without --cleanLivingBroker), or
    the group's live master, which holds a write lease."""

    code = ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


@_register
class ControllerNeedToRegisterError(FerryError):
    """A heartbeat from a replica the controller does not know: register first."""

    code = ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    default_retriable = True


@_register
class ControllerElectMasterFailedError(FerryError):
    """No replica may become master (none alive in the sync state set, or the one asked for
    is not in it)."""

    code = ResponseCode.CONTROLLER_ELECT_MASTER_FAILED
    default_retriable = True


@_register
class NoCredentialsError(FerryError):
    """Authentication is on and the request was not signed (no credentials given)."""

    code = ResponseCode.AUTH_NO_CREDENTIALS


@_register
class BadSignatureError(FerryError):
    """A signed request that does not authenticate: unknown or disabled access key, a wrong
    secret key, or a signature older than the accepted clock skew."""

    code = ResponseCode.AUTH_BAD_SIGNATURE


# ---- users and ACLs (ACL 2.0's admin commands) ----


@_register
class UserNotFoundError(FerryError):
    """No user of that name (getUser, updateUser, an ACL for a user that does not exist)."""

    code = ResponseCode.USER_NOT_EXIST


@_register
class AclNotFoundError(FerryError):
    """The subject has no ACL (getAcl, deleteAcl)."""

    code = ResponseCode.POLICY_NOT_EXIST


@_register
class UserExistAlreadyError(FerryError):
    """createUser of a name already taken (updateUser changes one)."""

    code = ResponseCode.USER_EXIST_ALREADY


@_register
class BadFrameError(FerryError):
    """A frame that could not be parsed: wrong shape, not msgpack, or missing fields."""

    code = ResponseCode.BAD_FRAME


class ConfigError(FerryError):
    """A configuration value that is missing or wrong; never sent on the wire."""

    code = ResponseCode.INVALID_PARAMETER


# what a cluster's security answers a request it does not admit (authentication on)
SECURITY_REFUSALS = (NoCredentialsError, BadSignatureError, NoPermissionError)


def error_for(code: int, message: str, retriable: bool | None = None) -> FerryError:
    """The typed exception for a wire code; unknown codes give a plain FerryError."""
    cls = _REGISTRY.get(code)
    if cls is None:
        return FerryError(message, retriable=bool(retriable), code=code)
    return cls(message, retriable=retriable)


def registered_codes() -> dict[int, type[FerryError]]:
    return dict(_REGISTRY)
