"""Error codes map back to the classes the daemon raised."""

from __future__ import annotations

from llmd import errors
from llmd.errors import LLMDError
from llmd.protocol import ProtocolError, RequestFailedError, error_from_code


def test_every_llmd_error_code_maps_back_to_its_class():
    classes = [getattr(errors, n) for n in dir(errors)]
    classes = [c for c in classes if isinstance(c, type) and issubclass(c, LLMDError)]
    for error_class in [*classes, ProtocolError, RequestFailedError]:
        error = error_from_code(error_class.code, "message", "param")
        assert type(error) is error_class
        assert (error.message, error.parameter) == ("message", "param")


def test_unknown_codes_keep_their_code():
    error = error_from_code("flux_capacitor", "too much flux")
    assert type(error) is LLMDError and error.code == "flux_capacitor"
    assert LLMDError.code == "internal"
