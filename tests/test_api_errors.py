"""The Comm API's errors are the binding's: every one is an ``HcclError`` with a code (issue 42), texts unchanged."""
from __future__ import annotations

import pickle

import pytest

import hcomm_cffi as hcomm
from hcomm_cffi import errors
from hcomm_cffi.api.consistency import CollectiveMismatchError
from hcomm_cffi.api.errors import (CommError, CommTimeoutError, ForeignProcessError, MessageMismatchError,
                                   NotInitializedError, NotMemberError, wrap_failure)
from hcomm_cffi.api.membership import MembershipError


@pytest.mark.parametrize("cls, code", [(CommError, 4), (CommTimeoutError, 9), (MessageMismatchError, 1),
                                       (NotMemberError, 1), (NotInitializedError, 7), (ForeignProcessError, 5),
                                       (CollectiveMismatchError, 4), (MembershipError, 4)])
def test_every_api_error_is_an_hccl_error_with_a_code_and_its_own_text(cls: type, code: int) -> None:
    err = cls("rank 0 of communicator 'w': what went wrong")
    assert isinstance(err, errors.HcclError) and isinstance(err, RuntimeError) and not err.from_library
    assert err.code == code
    assert str(err) == "rank 0 of communicator 'w': what went wrong" and err.args == (str(err),)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err) and back.code == code


def test_a_library_failure_keeps_its_code_and_type() -> None:
    lib = errors.HcclTimeoutError(9, "HcclAllReduce", "notify wait timed out")
    err = wrap_failure(lib, "rank 0 of communicator 'w': allreduce", {})
    assert isinstance(err, CommTimeoutError) and isinstance(err, TimeoutError) and err.code == 9
    assert str(err).startswith("rank 0 of communicator 'w': allreduce") and "notify wait timed out" in str(err)
    remote = wrap_failure(errors.HcclRemoteError(21, "HcclAllReduce", "peer gone"), "rank 1: barrier", {})
    assert type(remote) is CommError and remote.code == 21


def test_code_that_catches_the_bindings_errors_catches_the_apis() -> None:
    """Before issue 42 a CommError was not an HcclError: ``except HcclError`` missed every API failure."""
    with pytest.raises(errors.HcclError) as caught:
        hcomm.get_world()            # no init() in this process
    assert isinstance(caught.value, NotInitializedError) and caught.value.code == 7
