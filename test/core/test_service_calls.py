"""call_service's waits and resends, around a stand-in client (no ROS)."""

from __future__ import annotations

import threading

import pytest

from simreal_ros.nodes.services import call_service


class Future:
    def __init__(self) -> None:
        self._callbacks = []
        self.value = None

    def add_done_callback(self, callback) -> None:
        self._callbacks.append(callback)

    def finish(self, value) -> None:
        self.value = value
        for callback in self._callbacks:
            callback(self)

    def result(self):
        return self.value

    def done(self) -> bool:
        return self.value is not None


class Client:
    """Answers the request numbered ``answered`` (0-based) after ``delay_s``; loses the
    others."""

    srv_name = "/recorder/start"

    def __init__(
        self, answered: int | None, available: bool = True, delay_s: float = 0.01
    ) -> None:
        self.answered = answered
        self.delay_s = delay_s
        self.available = available
        self.sent: list[object] = []
        self.withdrawn: list[Future] = []

    def wait_for_service(self, timeout_sec: float) -> bool:
        return self.available

    def call_async(self, request) -> Future:
        future = Future()
        self.sent.append(request)
        if len(self.sent) - 1 == self.answered:
            threading.Timer(self.delay_s, future.finish, args=(f"answer to {request}",)).start()
        return future

    def remove_pending_request(self, future: Future) -> None:
        self.withdrawn.append(future)


def test_a_lost_answer_is_asked_for_again_when_the_request_may_be_resent():
    client = Client(answered=2)
    assert call_service(client, "start a", 5.0, resend_after_s=0.05) == "answer to start a"
    assert client.sent == ["start a"] * 3 and len(client.withdrawn) == 2


def test_a_late_answer_to_an_earlier_send_is_taken():
    # The first send's answer comes after two resends (DDS repaired its lost packet late).
    client = Client(answered=0, delay_s=0.25)
    assert call_service(client, "start b", 5.0, resend_after_s=0.1) == "answer to start b"
    assert len(client.sent) == 3
    # The resends still pending are withdrawn; the answered one is not.
    assert len(client.withdrawn) == 2 and all(not f.done() for f in client.withdrawn)


def test_without_resend_a_lost_answer_is_a_timeout_naming_the_service():
    client = Client(answered=None)
    with pytest.raises(TimeoutError, match="recorder stop service /recorder/start did not"):
        call_service(client, "stop", 0.2, "recorder stop")
    assert client.sent == ["stop"] and len(client.withdrawn) == 1


def test_resends_stop_at_the_timeout():
    client = Client(answered=None)
    with pytest.raises(TimeoutError, match=r"did not answer in 0\.3 s"):
        call_service(client, "start", 0.3, resend_after_s=0.1)
    assert 2 <= len(client.sent) <= 4


def test_a_missing_service_says_which_and_what_to_check():
    with pytest.raises(TimeoutError, match="not available after 1 s; is that node running"):
        call_service(Client(answered=0, available=False), "x", 1.0)
