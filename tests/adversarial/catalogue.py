"""The adversarial catalogue: loading the case files and refusing any case that cannot fail.

Each file cases/<group>.json is {"group": NAME, "about": TEXT, "cases": [CASE, ...]}; the
fields of a case are described in README.md. The loader is strict, as the daemon's policy
loader is: an unknown key, a missing expectation, a value of the wrong type or an unknown
{{placeholder}} is an error naming the file and the case, and the pass does not run. A
case without an expectation, or with one the harness would not read, would pass whatever
the daemon did.
"""

import fnmatch
import json
import os
import re

from integlib import PLACEHOLDER, client_hello, substitute

# What a case may name in {{...}}: run.py gives each run its own values (see README.md).
TEMPLATE_VARS = ("port", "tls_port", "sandbox", "ingress_port", "placeholder", "secret")

CASE_KEYS = {"id": str, "title": str, "via": str, "tunnel": dict, "send": list,
             "upstream_reply": list, "expect": dict, "pending": str, "skip": str}
CASE_REQUIRED = ("id", "title", "via", "send", "expect")
VIAS = ("egress", "ingress")
TUNNEL_KEYS = {"connect": str, "tls": bool}
EXPECT_KEYS = {"responses": list, "close": str, "upstream": (str, dict), "audit": list,
               "never_in_responses": list, "tls_alert": int, "end": str, "close_reason": str}
EXPECT_REQUIRED = ("responses", "close", "upstream", "audit")
CLOSES = ("closed", "open")
# How a closed connection ended, as its client reads it: "clean" (an EOF, after a TLS
# close_notify inside a TLS tunnel) or "aborted" (a reset, or TLS without close_notify).
ENDS = ("clean", "aborted")
# The mark {"reset": true} leaves in an expanded upstream_reply: the capture resets its
# connection there (SO_LINGER 0), once its peer has acknowledged every byte before it.
RESET = "reset"
RESPONSE_KEYS = {"status": int, "reason": (str, type(None)), "headers": dict,
                 "headers_absent": list, "body_contains": str, "bodiless": bool}
RESPONSE_REQUIRED = ("status", "reason")
UPSTREAM_KEYS = {"connections": int, "requests": int, "saw": list, "contains": list,
                 "never": list}
SEGMENT_FORMS = ({"repeat": str, "times": int}, {"client_hello": (str, type(None))},
                 {"await": str}, {"pause_s": (int, float)}, {"reset": bool})
PAUSE_S_MAX = 10  # a run's reads all end within run.py's RUN_DEADLINE_S
ID_RE = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}")


class CatalogueError(Exception):
    pass


def check_keys(where, obj, allowed, required=()):
    if not isinstance(obj, dict):
        raise CatalogueError("%s: an object is due, not %r" % (where, obj))
    for key, value in obj.items():
        if key not in allowed:
            raise CatalogueError("%s: unknown key %r" % (where, key))
        if not isinstance(value, allowed[key]) or isinstance(value, bool) != (
                allowed[key] is bool):
            raise CatalogueError("%s: %s: wrong type %s" % (where, key, type(value).__name__))
    for key in required:
        if key not in obj:
            raise CatalogueError("%s: %r is missing" % (where, key))


def check_segments(where, segments, allow_await):
    for i, seg in enumerate(segments):
        at = "%s[%d]" % (where, i)
        if isinstance(seg, str):
            continue
        form = next((f for f in SEGMENT_FORMS if isinstance(seg, dict) and set(seg) == set(f)),
                    None)
        if form is None:
            raise CatalogueError("%s: a segment is a string, {repeat, times}, {client_hello}, "
                                 "{await}, {pause_s} or {reset}, not %r" % (at, seg))
        check_keys(at, seg, form, form)
        if "await" in seg and (seg["await"] != "response" or not allow_await):
            raise CatalogueError("%s: only the request may hold {\"await\": \"response\"}" % at)
        if "reset" in seg and (allow_await or seg["reset"] is not True or
                               i != len(segments) - 1):
            raise CatalogueError("%s: {\"reset\": true} ends an upstream_reply, and only it"
                                 % at)
        if "pause_s" in seg and (allow_await or not 0 < seg["pause_s"] <= PAUSE_S_MAX):
            raise CatalogueError("%s: only upstream_reply may hold {\"pause_s\": S}, "
                                 "0 < S <= %d" % (at, PAUSE_S_MAX))


def check_expect(where, expect):
    check_keys(where, expect, EXPECT_KEYS, EXPECT_REQUIRED)
    if expect["close"] not in CLOSES:
        raise CatalogueError("%s: close is one of %s" % (where, ", ".join(CLOSES)))
    if "end" in expect and (expect["end"] not in ENDS or expect["close"] != "closed"):
        raise CatalogueError("%s: end is one of %s, of a connection that closed" % (
            where, ", ".join(ENDS)))
    for i, resp in enumerate(expect["responses"]):
        check_keys("%s.responses[%d]" % (where, i), resp, RESPONSE_KEYS, RESPONSE_REQUIRED)
    upstream = expect["upstream"]
    if isinstance(upstream, str):
        if upstream != "none":
            raise CatalogueError("%s: upstream is \"none\" or an object" % where)
    else:
        check_keys(where + ".upstream", upstream, UPSTREAM_KEYS)
        if not upstream:
            raise CatalogueError("%s: upstream {} checks nothing" % where)
    if not expect["audit"]:
        raise CatalogueError("%s: audit is empty: every case reaches a decision, and its "
                             "record is due" % where)
    for i, rec in enumerate(expect["audit"]):
        if not isinstance(rec, dict) or not rec:
            raise CatalogueError("%s.audit[%d]: a non-empty object is due" % (where, i))


def check_case(where, case):
    check_keys(where, case, CASE_KEYS, CASE_REQUIRED)
    if not ID_RE.fullmatch(case["id"]):
        raise CatalogueError("%s: id %r is not [a-z0-9.-]" % (where, case["id"]))
    if case["via"] not in VIAS:
        raise CatalogueError("%s: via is one of %s" % (where, ", ".join(VIAS)))
    if "tunnel" in case:
        check_keys(where + ".tunnel", case["tunnel"], TUNNEL_KEYS, ("connect", "tls"))
        if case["via"] != "egress":
            raise CatalogueError("%s: a tunnel is opened on the egress socket only" % where)
    if not case["send"]:
        raise CatalogueError("%s: send is empty" % where)
    check_segments(where + ".send", case["send"], True)
    check_segments(where + ".upstream_reply", case.get("upstream_reply", []), False)
    check_expect(where + ".expect", case["expect"])
    unknown = {m.group(1) for m in PLACEHOLDER.finditer(json.dumps(case))} - set(TEMPLATE_VARS)
    if unknown:
        raise CatalogueError("%s: unknown placeholder(s) %s" % (where, sorted(unknown)))


def load(case_dir, skip_list, pattern=None):
    """Every case of case_dir/*.json, with its "group" and its "name" (GROUP/ID, unique),
    or those whose name matches the glob <pattern>. A case marked "skip" must be on
    <skip_list> ({name: reason})."""
    cases = []
    for fname in sorted(f for f in os.listdir(case_dir) if f.endswith(".json")):
        path = os.path.join(case_dir, fname)
        with open(path, encoding="utf-8") as f:
            try:
                doc = json.load(f)
            except ValueError as e:
                raise CatalogueError("%s: %s" % (path, e)) from None
        check_keys(path, doc, {"group": str, "about": str, "cases": list},
                   ("group", "about", "cases"))
        if doc["group"] != fname[:-len(".json")]:
            raise CatalogueError("%s: group %r is not the file's name" % (path, doc["group"]))
        seen = set()
        for i, case in enumerate(doc["cases"]):
            where = "%s: case %d (%s)" % (path, i + 1, case.get("id", "no id")
                                          if isinstance(case, dict) else "?")
            check_case(where, case)
            if case["id"] in seen:
                raise CatalogueError("%s: id %r is there twice" % (where, case["id"]))
            seen.add(case["id"])
            case = dict(case, group=doc["group"], name="%s/%s" % (doc["group"], case["id"]))
            if "skip" in case and case["name"] not in skip_list:
                raise CatalogueError("%s: skipped, but not on README.md's skip list" % where)
            if pattern is None or fnmatch.fnmatch(case["name"], pattern):
                cases.append(case)
    return cases


def expand(segments, values):
    """Bytes of <segments> under the run's template <values>: a list of byte strings,
    "await" marks (None), pauses (seconds, a float) and the RESET mark, in order."""
    out = []
    for seg in substitute(segments, values):
        if isinstance(seg, (str, int)):
            out.append(str(seg).encode("latin-1"))
        elif "repeat" in seg:
            out.append(seg["repeat"].encode("latin-1") * seg["times"])
        elif "client_hello" in seg:
            out.append(client_hello(seg["client_hello"]))
        elif "pause_s" in seg:
            out.append(float(seg["pause_s"]))
        elif "reset" in seg:
            out.append(RESET)
        else:
            out.append(None)
    return out
