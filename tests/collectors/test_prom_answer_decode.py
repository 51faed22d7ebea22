"""decode_answer is json.loads, decoded a sample at a time: the same value for every answer,
the same exception for every broken one, whatever the answer's shape or spacing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import prom_answer
from collectors.prom_answer import decode_answer

SAMPLE = {"metric": {"__name__": "up", "node": "n-1"}, "value": [1.5, "1"]}


def same(content: bytes) -> None:
    """decode_answer(content) is json.loads(content): value, or exception type and words."""
    try:
        want: Any = json.loads(content)
    except (ValueError, RecursionError) as exc:
        with pytest.raises(type(exc)) as got:
            decode_answer(content)
        assert str(got.value) == str(exc)
        return
    assert decode_answer(content) == want


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
samples = st.fixed_dictionaries({
    "metric": st.dictionaries(st.text(), st.text(), max_size=3),
    "value": st.tuples(st.floats(allow_nan=False), st.text()).map(list),
}) | json_values


@settings(max_examples=300, deadline=None)
@given(items=st.lists(samples, max_size=6), extra=st.dictionaries(st.text(), json_values,
                                                                   max_size=2),
       indent=st.sampled_from([None, 0, 1, "\t", " \r\n"]), key_first=st.booleans())
def test_any_answer_decodes_as_json_loads_decodes_it(items: list[Any], extra: dict[str, Any],
                                                     indent: Any, key_first: bool) -> None:
    data = {"resultType": "vector", "result": items}
    body = {**extra, "status": "success", "data": data} if key_first else \
        {"status": "success", "data": data, **extra}
    same(json.dumps(body, indent=indent).encode())
    same(json.dumps(body, indent=indent, ensure_ascii=False).encode())


@pytest.mark.parametrize("text", [
    '{"status":"success","data":{"resultType":"vector","result":[]}}',
    '{"status":"success","data":{"result" : [ ] }}',
    '{"status":"success","data":{"result":[' + json.dumps(SAMPLE) + "]}}",
    # the list is cut, or is not a list after all, or has odd separators
    '{"status":"success","data":{"result":[' + json.dumps(SAMPLE),
    '{"status":"success","data":{"result":[' + json.dumps(SAMPLE) + ";{}]}}",
    '{"status":"success","data":{"result":[1,,2]}}',
    '{"status":"success","data":{"result":[1,]}}',
    '{"status":"success","data":{"result":[1]}} trailing',
    '{"status":"success","data":{"result":[1]}',
    # "result" lists elsewhere than data.result: the first one found is not the answer's
    '{"warnings":{"result":[1,2]},"status":"success","data":{"result":[3]}}',
    '{"status":"success","data":{"result":[1],"result":[2]}}',
    '{"status":"success","data":{"result":[1]},"data":{"result":[2]}}',
    '{"status":"success","data":[{"result":[1]}]}',
    '["result",{"result":[1]}]',
    # a label that spells the key inside a string, and the stand-in itself in the answer
    '{"status":"success","data":{"result":[{"metric":{"a":"\\"result\\":["}}]}}',
    '{"status":"success","data":{"result":["\\u0000engram-top: the result list"]}}',
    '{"status":"success","data":{"result":"\\u0000engram-top: the result list"}}',
    # a stand-in guessed, where a list found first elsewhere would land in its place
    '{"warnings":{"result":[1]},"status":"success",'
    '"data":{"result":"\\u0000engram-top: the result list"}}',
    # numbers JSON does not have but Python's json takes, and deep nesting
    '{"status":"success","data":{"result":[NaN,Infinity,-Infinity]}}',
    '{"status":"success","data":{"result":[' + "[" * 100_000 + "]" * 100_000 + "]}}",
    "",
    "{",
    "{}",
])
def test_odd_and_broken_answers_decode_or_fail_as_json_loads_does(text: str) -> None:
    same(text.encode())


@pytest.mark.parametrize("content", [
    b'\xef\xbb\xbf{"data":{"result":[1]}}',  # a BOM
    '{"data":{"result":[1]}}'.encode("utf-16"),
    b' {"data":{"result":[1]}}',
    b'{"data":{"result":["\xff"]}}',  # not UTF-8
    b'{"data":{"result":["\xc3\xa9"]}}',
])
def test_encodings_are_json_loads_own(content: bytes) -> None:
    same(content)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Where each piece decode_answer decodes starts."""
    starts: list[int] = []

    class Counting(json.JSONDecoder):
        def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
            starts.append(idx)
            return super().raw_decode(s, idx)

    monkeypatch.setattr(prom_answer, "_DECODER", Counting())
    return starts


def test_the_result_list_is_decoded_a_sample_at_a_time(calls: list[int]) -> None:
    """What lets the event loop run meanwhile: one short decode per sample, and the rest of
    the answer decoded without them (it fails on the code that decoded the whole text)."""
    body = {"status": "success", "data": {"resultType": "vector", "result": [SAMPLE] * 50}}
    assert decode_answer(json.dumps(body).encode()) == body
    assert len(calls) == 50


def test_a_list_of_tiny_values_is_decoded_whole(calls: list[int]) -> None:
    """32 MB of `0,` a piece at a time would take seconds a refresh: after the first
    thousand values are seen to be no samples, json.loads takes the rest at once."""
    body = {"status": "success", "data": {"result": [0] * 100_000}}
    assert decode_answer(json.dumps(body).encode()) == body
    assert len(calls) == 1024
    calls.clear()
    samples = {"status": "success", "data": {"result": [SAMPLE] * 3000}}
    assert decode_answer(json.dumps(samples, separators=(",", ":")).encode()) == samples
    assert len(calls) == 3000
