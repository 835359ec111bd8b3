"""``format`` values as regular expressions (full-match), exact to their RFCs where that is
regular, and never wider than what ``jsonschema``'s format checker accepts.

Deliberate narrowings (each documented in docs/json-schema.md): years 0001-9999 and no leap
second (Python's ``datetime`` rejects year 0 and second 60); hostnames either up to four
labels (the last at most 61 characters) or up to twelve labels of at most 20 characters, so
the 253-character limit holds without counting; ``relative-json-pointer`` prefixes whose
digits never follow a ``0`` (``jsonschema`` rejects ``100``).
"""

from __future__ import annotations

_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
DATE_TIME = rf"{DATE}[Tt]{TIME}"

_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = r"(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
DURATION = rf"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"

_HEX = "[0-9a-fA-F]"
UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = rf"{_HEX}{{1,4}}"
_LS32 = rf"(?:{_H16}:{_H16}|{IPV4})"


def _ipv6() -> str:
    forms = [rf"(?:{_H16}:){{6}}{_LS32}", rf"::(?:{_H16}:){{5}}{_LS32}"]
    for before, after in ((0, 4), (1, 3), (2, 2), (3, 1)):
        head = f"(?:(?:{_H16}:){{0,{before}}}{_H16})?" if before else f"(?:{_H16})?"
        tail = f"(?:{_H16}:){{{after}}}" if after > 1 else f"{_H16}:"
        forms.append(rf"{head}::{tail}{_LS32}")
    forms.append(rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}")
    forms.append(rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}")
    forms.append(rf"(?:(?:{_H16}:){{0,6}}{_H16})?::")
    return "(?:" + "|".join(forms) + ")"


IPV6 = _ipv6()


def _label(most: int) -> str:
    """An RFC 1123 label of at most ``most`` characters whose 3rd and 4th characters are not
    both hyphens (RFC 5891 reserves those: A-labels must be valid punycode, which a grammar
    cannot check, so we accept none)."""
    alnum, ldh = "[A-Za-z0-9]", "[A-Za-z0-9-]"
    long = f"{alnum}{ldh}(?:{alnum}{ldh}|-{alnum}){ldh}{{0,{most - 5}}}{alnum}"
    return f"(?:{alnum}(?:{ldh}?{alnum})?|{long})"


HOSTNAME = (
    rf"(?:{_label(63)}(?:\.{_label(63)}){{0,2}}(?:\.{_label(61)})?"
    rf"|{_label(20)}(?:\.{_label(20)}){{4,11}})"
)

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_STRING = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_QUOTED = r'"(?:[ !#-\[\]-~]|\\[ -~])*"'
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
EMAIL = rf"(?:{_DOT_STRING}|{_QUOTED})@(?:{_DOMAIN}|\[{IPV4}\]|\[[Ii][Pp][Vv]6:{IPV6}\])"
# RFC 6531: atext and domain labels may also hold any non-ASCII character
_UTF8 = "\u0080-\uffff\U00010000-\U0010ffff"
_IDN_ATEXT = rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~{_UTF8}-]"
_IDN_LABEL = f"[A-Za-z0-9{_UTF8}](?:[A-Za-z0-9{_UTF8}-]*[A-Za-z0-9{_UTF8}])?"
IDN_EMAIL = (
    rf"(?:{_IDN_ATEXT}+(?:\.{_IDN_ATEXT}+)*|{_QUOTED})@"
    rf"(?:{_IDN_LABEL}(?:\.{_IDN_LABEL})*|\[{IPV4}\]|\[[Ii][Pp][Vv]6:{IPV6}\])"
)

# RFC 3986 / RFC 3987
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_UCS = "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef" + "".join(
    f"{chr(plane << 16)}-{chr((plane << 16) | 0xFFFD)}" for plane in range(1, 15)
)
_IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _uri(international: bool, reference: bool) -> str:
    unreserved = _UNRESERVED + (_UCS if international else "")
    pct = rf"%{_HEX}{_HEX}"
    pchar = rf"(?:[{unreserved}{_SUB_DELIMS}:@]|{pct})"
    query_extra = _IPRIVATE if international else ""
    query = rf"(?:[{unreserved}{_SUB_DELIMS}:@/?{query_extra}]|{pct})*"
    fragment = rf"(?:[{unreserved}{_SUB_DELIMS}:@/?]|{pct})*"
    userinfo = rf"(?:[{unreserved}{_SUB_DELIMS}:]|{pct})*"
    reg_name = rf"(?:[{unreserved}{_SUB_DELIMS}]|{pct})*"
    ip_future = rf"[vV]{_HEX}+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
    host = rf"(?:\[(?:{IPV6}|{ip_future})\]|{reg_name})"
    authority = rf"(?:{userinfo}@)?{host}(?::[0-9]*)?"
    segment = f"{pchar}*"
    segment_nz = f"{pchar}+"
    abempty = f"(?:/{segment})*"
    absolute = f"/(?:{segment_nz}(?:/{segment})*)?"
    rootless = f"{segment_nz}(?:/{segment})*"
    tail = rf"(?:\?{query})?(?:#{fragment})?"
    scheme = r"[A-Za-z][A-Za-z0-9+\-.]*"
    hier = f"(?://{authority}{abempty}|{absolute}|{rootless}|)"
    uri = f"{scheme}:{hier}{tail}"
    if not reference:
        return uri
    nc = rf"(?:[{unreserved}{_SUB_DELIMS}@]|{pct})+"
    relative = f"(?://{authority}{abempty}|{absolute}|{nc}(?:/{segment})*|)"
    return f"(?:{uri}|{relative}{tail})"


_POINTER = r"(?:/(?:[^~/]|~[01])*)*"

FORMATS: dict[str, str] = {
    "date": DATE,
    "time": TIME,
    "date-time": DATE_TIME,
    "duration": DURATION,
    "uuid": UUID,
    "email": EMAIL,
    "idn-email": IDN_EMAIL,
    "hostname": HOSTNAME,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "uri": _uri(False, False),
    "uri-reference": _uri(False, True),
    "iri": _uri(True, False),
    "iri-reference": _uri(True, True),
    "json-pointer": _POINTER,
    "relative-json-pointer": rf"(?:0|[1-9]+0?)(?:#|{_POINTER})",
}

# formats the specification defines whose language is not regular or not handled:
# they are assertions for jsonschema, so we refuse rather than ignore them.
UNSUPPORTED = {"regex", "idn-hostname", "uri-template"}


def format_regex(name: str) -> str | None:
    """The full-match regex of a supported format, ``None`` for unknown formats (which
    JSON Schema treats as annotations)."""
    return FORMATS.get(name)
