"""The result post's fast validation accepts exactly what `ResultIn` accepts, unchanged, and
leaves everything else (with its error wording) to `ResultIn`."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from judging.api.node_serializers import ResultIn, result_in_fast

VERDICTS = ["AC", "WA", "TLE", "MLE", "RE", "CE", "OLE"]

# What DRF's CharField accepts: no NUL, no lone surrogates.
clean_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)

junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-5, max_value=2**31 + 5), st.floats(allow_nan=False),
    st.sampled_from(["", " ", "AC", "ac", "x" * 65, " oops ", "a\x00b", "\ud800", "5", "JUDGED"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.sampled_from(["freeSlots", "x"]), st.integers(), max_size=2),
    st.fixed_dictionaries({"freeSlots": st.integers(0, 2)}, optional={"inlineSource": st.sampled_from(
        [True, False, "true", 1, 0, None, "yes"])}),
)


def _case(ordinal, broken):
    return st.fixed_dictionaries(
        {"ordinal": st.just(ordinal), "verdict": st.sampled_from(VERDICTS), "timeMs": st.integers(0, 5000),
         "memoryKb": st.integers(0, 2**20), "score": st.integers(0, 100)},
        optional={"extra": st.just(1)} if broken else {})


@st.composite
def bodies(draw, broken=True):
    outcome = draw(st.sampled_from(["JUDGED", "INFRA_ERROR", "RELEASED"]))
    body = {"leaseEpoch": draw(st.integers(0, 2**31)), "outcome": outcome}
    if outcome == "JUDGED":
        body.update(verdict=draw(st.sampled_from(VERDICTS)), score=draw(st.integers(0, 100)),
                    timeMs=draw(st.integers(0, 9000)), memoryKb=draw(st.integers(0, 2**20)),
                    compileOutput=draw(clean_text if not broken else st.text(max_size=20)),
                    cases=[draw(_case(i, broken)) for i in range(1, draw(st.integers(0, 3)) + 1)])
    elif outcome == "INFRA_ERROR":
        body.update(error=draw(st.sampled_from(["sandbox", "artifact_missing", "x" * 64])),
                    message=draw(clean_text if not broken else st.text(max_size=20)))
    if outcome != "INFRA_ERROR" and draw(st.booleans()):
        body["error"] = draw(st.sampled_from(["", None]))  # an agent that sends every field
    if draw(st.booleans()):
        body["claim"] = {"freeSlots": draw(st.integers(0, 1024))}
        if draw(st.booleans()):
            body["claim"]["inlineSource"] = draw(st.booleans())
    # Then break it, or not: drop, replace or add fields, including nested ones.
    for _ in range(draw(st.integers(0, 2)) if broken else 0):
        action = draw(st.sampled_from(["drop", "replace", "add", "case"]))
        keys = sorted(body)
        if action == "drop" and keys:
            body.pop(draw(st.sampled_from(keys)))
        elif action == "replace" and keys:
            body[draw(st.sampled_from(keys))] = draw(junk)
        elif action == "add":
            body[draw(st.sampled_from(["verdict", "score", "error", "checks", "unknown", "claim", "message"]))] = \
                draw(junk)
        elif action == "case" and isinstance(body.get("cases"), list) and body["cases"] \
                and isinstance(body["cases"][0], dict):
            body["cases"][0][draw(st.sampled_from(["ordinal", "verdict", "score", "timeMs"]))] = draw(junk)
    return body


def _plain(value):
    return json.loads(json.dumps(value))


@settings(max_examples=1500, deadline=None)
@given(bodies())
def test_the_fast_path_agrees_with_the_serializer_whenever_it_answers(body):
    fast = result_in_fast(json.loads(json.dumps(body)))
    serializer = ResultIn(data=body)
    if fast is not None:
        assert serializer.is_valid(), (body, serializer.errors)
        assert _plain(fast) == _plain(serializer.validated_data)


@settings(max_examples=300, deadline=None)
@given(bodies(broken=False))
def test_well_formed_results_take_the_fast_path(body):
    fast = result_in_fast(json.loads(json.dumps(body)))
    assert fast is not None, body
    serializer = ResultIn(data=body)
    assert serializer.is_valid() and _plain(fast) == _plain(serializer.validated_data)
