import re


class IdConverter:
    """A positive id that fits a BIGINT; anything else is simply not a route (404)."""

    regex = "[1-9][0-9]{0,17}"

    def to_python(self, value):
        return int(value)

    def to_url(self, value):
        return str(value)


class SubmissionTypeConverter:
    regex = "[A-Za-z]{1,16}"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


_WHOLE_NUMBER = re.compile("[0-9]{1,18}")


def whole_number(raw: str | None) -> int | None:
    """A form or query value as a whole number, spelled in ASCII digits (at most 18: it fits
    a BIGINT, as an id in a route does); None for anything else. `str.isdigit()` is no test
    for this: it is also true of "²" and other digits `int()` refuses, and of numbers too long
    for the database."""
    raw = (raw or "").strip()
    return int(raw) if _WHOLE_NUMBER.fullmatch(raw) else None
