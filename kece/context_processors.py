"""Context every page's layout reads."""

from django.utils.http import url_has_allowed_host_and_scheme

from kece.timezones import zone_name


def language_switch(request) -> dict:
    """Where the top bar's language switch returns: this page, or, for a page that answered
    a form (a POST to an address that answers only POSTs), the page the form was on. A
    switch back to a POST-only address got a bare 405 the browser showed in English."""
    if request.method in ("GET", "HEAD"):
        return {"language_next": request.get_full_path()}
    referer = request.META.get("HTTP_REFERER", "")
    back = referer if url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()},
                                                      require_https=request.is_secure()) else "/"
    return {"language_next": back}


def time_zone(request) -> dict:
    """The name the pages give their times' zone (`kece.timezones.zone_name`): "09:00 Beijing time"."""
    return {"time_zone": zone_name()}
