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
