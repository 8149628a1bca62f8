"""Shared HTTP plumbing: JSON-only views whose errors all use the contract's envelope."""

import re
from datetime import timezone as dt_timezone

from django.conf import settings
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.exceptions import NotAcceptable, ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.utils import json
from rest_framework.views import APIView

from kece.errors import Invalid, TooLarge
from kece.permissions import USER_AUTHENTICATION, ManagesJudgers


def check_body_size(request) -> None:
    """Refuse bodies over the contract's 1 MiB before anything parses them."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        raise TooLarge(f"The body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.")


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate_in(raw: bytes, data) -> bool:
    """Whether parsed JSON holds a string that is not valid Unicode: an escaped surrogate
    (`\\ud800`) without its pair. Nothing could store or echo such a string. Only bodies
    that escape a surrogate at all are searched."""
    if not _SURROGATE_ESCAPE.search(raw):
        return False
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


class ContractJSONParser(JSONParser):
    """DRF's parser, reading the body as UTF-8 only, with JSON nested deeper than Python can
    parse, integers longer than it converts, and strings that are not valid Unicode answered
    as malformed.

    DRF decodes with whatever codec the Content-Type's charset names, and Python's codecs
    include bz2 and zlib: a body of a few hundred bytes would expand to gigabytes past the
    body limit. JSON between systems is UTF-8 (RFC 8259), so the parameter is not a codec
    to run."""

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=json.strict_constant if self.strict else None)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not UTF-8 ({exc.reason})") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        if lone_surrogate_in(raw, data):
            raise ParseError("JSON parse error - a string is not valid Unicode (lone surrogate)")
        return data


class LenientNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, falling back to the view's first format instead of refusing
    (406, or 404 for an unknown ?format=): each view answers in the format the contract
    gives it (JSON; an artifact's bytes; the schema's YAML unless JSON is asked for)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except (NotAcceptable, Http404):
            return renderers[0], renderers[0].media_type

    def select_parser(self, request, parsers):
        # A body sent without a Content-Type is read as the view's format (JSON), as the
        # bare claim and result read theirs: a client that leaves the header out is not
        # refused on one call and heard on the next. Another type stays refused.
        if not request.content_type:
            return parsers[0]
        return super().select_parser(request, parsers)


class ContractView(APIView):
    """One operation per view; JSON in, JSON out; errors as {"error", "detail"}."""

    parser_classes = [ContractJSONParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = LenientNegotiation

    def initial(self, request, *args, **kwargs):
        check_body_size(request)
        super().initial(request, *args, **kwargs)


class AdminView(ContractView):
    """The admin API's views: a user with the nodes.manage_judgers permission."""

    authentication_classes = USER_AUTHENTICATION
    permission_classes = [ManagesJudgers]


def validated(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def iso(value) -> str | None:
    """UTC ISO 8601 with Z, as the contract writes timestamps."""
    if value is None:
        return None
    return value.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z")


class ContractPagination(PageNumberPagination):
    """`?page=` and `?pageSize=` (50 by default, at most 200)."""

    page_size = 50
    page_size_query_param = "pageSize"
    max_page_size = 200

    def paginate_queryset(self, queryset, request, view=None):
        # DRF answers a page that does not exist with 404, which the contract keeps for
        # unknown routes: it is an invalid field.
        try:
            return super().paginate_queryset(queryset, request, view)
        except drf_exceptions.NotFound:
            raise Invalid("That page does not exist.", fields={"page": ["no such page"]}) from None

    def links(self) -> dict:
        """`{count, next, previous}` of the page cut last, for a list that is one field of a larger answer."""
        return {"count": self.page.paginator.count, "next": self.get_next_link(), "previous": self.get_previous_link()}
