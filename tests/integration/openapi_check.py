"""Checks HTTP responses of ingestd against openapi.yaml.

The integration harness calls check_response() for every response it receives, so every
integration test is also a conformance test of the spec: the status must be listed for the
path and method (or be `default`), the Content-Type must be one the response declares, a JSON
body must match its schema (Draft 2020-12, $refs resolved into `components`), NDJSON bodies
are checked line by line against the media type's `x-itemSchema` (OpenAPI 3.2's `itemSchema`,
spelled as an extension because the spec is 3.1), and declared headers that are present must
match their schemas (`required: true` ones must be present). Other bodies (Prometheus text) are
checked by Content-Type only.

Paths the spec does not list must answer 404, and methods a path does not list must answer a
status that one of the path's operations documents (405 with Allow, or 404 for /v1/log when it
is off), in both cases with the error body that status documents.

Tests that speak deliberately broken HTTP on a raw socket are outside the harness and so
outside this check; they may still call check_response() for the answers they can parse.

Needs PyYAML and jsonschema (Debian: python3-yaml, python3-jsonschema; scripts/install-deps).
"""

import json
import os
import re
import threading

try:
    import yaml
    import jsonschema
except ImportError as e:  # a missing check must fail loudly, never pass silently
    raise ImportError("openapi_check needs PyYAML and jsonschema (Debian: python3-yaml "
                      "python3-jsonschema; run scripts/install-deps): %s" % e) from e

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_PATH = os.path.abspath(
    os.environ.get("INGESTD_OPENAPI") or os.path.join(HERE, "..", "..", "openapi.yaml"))

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_BODY_CHARS = 400  # how much of a failing body goes into the message


class OpenApiError(AssertionError):
    """A response that the spec does not describe."""


def _media_type(value):
    """'Application/JSON; charset=utf-8' -> 'application/json' ('' when absent)."""
    return (value or "").split(";", 1)[0].strip().lower()


def _media_matches(declared, actual):
    d = declared.lower()
    if d == "*/*" or d == actual:
        return True
    if d.endswith("/*"):
        return actual.startswith(d[:-1])
    return False


def _path_key(path):
    """The router's view of a request target: no query string, at most one trailing '/' off."""
    p = path.split("?", 1)[0].split("#", 1)[0]
    if len(p) > 1 and p.endswith("/"):
        p = p[:-1]
    return p


class Spec:
    """openapi.yaml loaded once; validators built on first use and cached."""

    def __init__(self, path=SPEC_PATH):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        if not isinstance(self.doc, dict) or not str(self.doc.get("openapi", "")).startswith("3.1"):
            raise OpenApiError("%s: not an OpenAPI 3.1 document" % path)
        self.paths = self.doc.get("paths") or {}
        self._validators = {}
        # jsonschema's older RefResolver keeps a scope stack per validator: not thread-safe,
        # and harness users post from many threads.
        self._lock = threading.Lock()
        for name, schema in (self.doc.get("components", {}).get("schemas") or {}).items():
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as e:
                raise OpenApiError("%s: components/schemas/%s is not a valid schema: %s"
                                   % (path, name, e.message)) from e

    # ---- $ref resolution of OpenAPI objects (responses, headers) --------------

    def resolve(self, obj):
        """Follows an OpenAPI `$ref` (local, '#/...') until a real object; returns (obj, ref)."""
        ref = None
        seen = 0
        while isinstance(obj, dict) and "$ref" in obj:
            ref = obj["$ref"]
            if not ref.startswith("#/"):
                raise OpenApiError("only local $refs are supported, got %r" % ref)
            node = self.doc
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(node, dict) or part not in node:
                    raise OpenApiError("dangling $ref %r in %s" % (ref, self.path))
                node = node[part]
            obj = node
            seen += 1
            if seen > 20:
                raise OpenApiError("$ref loop at %r" % ref)
        return obj, ref

    def validator(self, key, schema):
        """A Draft 2020-12 validator for `schema` whose '#/components/...' refs resolve."""
        v = self._validators.get(key)
        if v is None:
            # The schema is embedded in a root that carries the spec's components, so a
            # '#/components/schemas/X' pointer resolves the same way in old (RefResolver) and
            # new (referencing) jsonschema releases.
            root = {"allOf": [schema], "components": self.doc.get("components", {})}
            v = jsonschema.Draft202012Validator(root)
            self._validators[key] = v
        return v

    def _errors(self, key, schema, instance):
        with self._lock:
            v = self.validator(key, schema)
            errors = sorted(v.iter_errors(instance), key=lambda e: list(e.absolute_path))
        out = []
        for e in errors[:5]:
            # allOf/oneOf wrap the real cause; the deepest context says what is wrong.
            leaf = e
            while leaf.context:
                leaf = sorted(leaf.context, key=lambda c: -len(c.absolute_path))[0]
            where = "$" + "".join("[%r]" % p for p in leaf.absolute_path)
            out.append("%s: %s" % (where, leaf.message))
        return out

    # ---- the check ------------------------------------------------------------

    def _templated(self, path):
        """(template, path item) of a templated path such as /v1/events/{messageId}, whose last
        parameter takes the whole rest of the path (slashes too), or (path key, None)."""
        p = path.split("?", 1)[0].split("#", 1)[0]
        for tmpl, item in self.paths.items():
            if "{" not in tmpl:
                continue
            rx = re.escape(tmpl)
            rx = re.sub(r"\\\{[^}]*\\\}$", ".*", rx)
            rx = re.sub(r"\\\{[^}]*\\\}", "[^/]+", rx)
            if re.fullmatch(rx, p):
                return tmpl, item
        return _path_key(path), None

    def find_response(self, method, path, status):
        """(response object, where) for this request and status; raises when not listed."""
        m = method.lower()
        key = _path_key(path)
        item = self.paths.get(key)
        if item is None:
            key, item = self._templated(path)
        st = str(status)
        if item is None:
            # The server answers every unknown path with 404 and the error body.
            if status != 404:
                raise OpenApiError("path %s is not in the spec, so 404 was expected" % key)
            return {"description": "unknown path",
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}}, "unknown path"
        op = item.get(m) if m in METHODS else None
        if op is None:
            # Undocumented method on a known path: the status must be one some operation of
            # this path documents for such requests (405 with Allow, or 404 when the route is
            # off), with that status's body.
            for other in METHODS:
                o = item.get(other)
                if isinstance(o, dict) and st in (o.get("responses") or {}) and st in ("404",
                                                                                      "405"):
                    resp, ref = self.resolve(o["responses"][st])
                    return resp, "%s %s %s (%s)" % (other.upper(), key, st, ref or "inline")
            raise OpenApiError("%s %s is not in the spec and %s is not a 404/405 that another "
                               "method of the path documents" % (method, key, status))
        responses = op.get("responses") or {}
        for cand in (st, st[0] + "XX", "default"):
            if cand in responses:
                resp, ref = self.resolve(responses[cand])
                return resp, "%s %s %s (%s)" % (method.upper(), key, cand, ref or "inline")
        raise OpenApiError("status %s is not listed for %s %s (listed: %s)"
                           % (status, method.upper(), key, ", ".join(sorted(responses))))

    def check(self, method, path, status, headers, body):
        """Raises OpenApiError when the response is not as the spec says. headers: [(k, v)]."""
        try:
            resp, where = self.find_response(method, path, status)
            self._check_headers(resp, where, headers)
            self._check_body(method, resp, where, headers, body)
        except OpenApiError as e:
            raise OpenApiError("openapi.yaml: %s %s -> %d: %s\n  body: %r"
                               % (method.upper(), path, status, e,
                                  bytes(body or b"")[:_BODY_CHARS])) from None

    def _check_headers(self, resp, where, headers):
        have = {}
        for k, v in headers or ():
            have.setdefault(k.lower(), v)
        for name, h in (resp.get("headers") or {}).items():
            h, _ = self.resolve(h)
            value = have.get(name.lower())
            if value is None:
                if h.get("required"):
                    raise OpenApiError("required header %s missing (%s)" % (name, where))
                continue
            schema = h.get("schema")
            if not schema:
                continue
            # Header values are strings on the wire; integer schemas get the parsed number.
            s, _ = self.resolve(schema)
            inst = value
            if s.get("type") in ("integer", "number"):
                if not re.fullmatch(r"-?\d+(\.\d+)?", value.strip()):
                    raise OpenApiError("header %s: %r is not a number (%s)" % (name, value, where))
                inst = float(value) if "." in value else int(value)
            errs = self._errors(("header", where, name), schema, inst)
            if errs:
                raise OpenApiError("header %s: %r: %s (%s)" % (name, value, "; ".join(errs),
                                                                where))

    def _check_body(self, method, resp, where, headers, body):
        content = resp.get("content")
        if method.upper() == "HEAD":
            return  # no body on the wire; status and headers are all there is
        ctype_raw = next((v for k, v in headers or () if k.lower() == "content-type"), None)
        if not content:
            if body:
                raise OpenApiError("the spec declares no body (%s), got %d bytes"
                                   % (where, len(body)))
            return
        ctype = _media_type(ctype_raw)
        media = None
        for declared, m in content.items():
            if _media_matches(declared, ctype):
                media = m or {}
                break
        if media is None:
            raise OpenApiError("Content-Type %r is not one of %s (%s)"
                               % (ctype_raw, ", ".join(content), where))
        if ctype == "application/json" or ctype.endswith("+json"):
            try:
                doc = json.loads(bytes(body).decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                raise OpenApiError("body is not JSON (%s): %s" % (where, e))
            schema = media.get("schema")
            if schema is not None:
                errs = self._errors(("body", where, ctype), schema, doc)
                if errs:
                    raise OpenApiError("body does not match the schema of %s: %s"
                                       % (where, "; ".join(errs)))
        elif ctype in ("application/x-ndjson", "application/jsonl", "application/json-seq"):
            item = media.get("x-itemSchema")
            if item is None:
                return
            text = bytes(body).decode("utf-8", "replace")
            if text and not text.endswith("\n"):
                raise OpenApiError("NDJSON body does not end in a newline (%s)" % where)
            for n, line in enumerate(text.splitlines()):
                try:
                    doc = json.loads(line)
                except ValueError as e:
                    raise OpenApiError("NDJSON line %d is not JSON (%s): %s" % (n, where, e))
                errs = self._errors(("line", where, ctype), item, doc)
                if errs:
                    raise OpenApiError("NDJSON line %d does not match the item schema of %s: %s"
                                       "\n  line: %r" % (n, where, "; ".join(errs), line[:300]))
        # Anything else (text/plain metrics): the Content-Type match above is the check.


_spec = None
_spec_lock = threading.Lock()


def spec():
    """The spec, loaded on first use (one parse per test process)."""
    global _spec
    with _spec_lock:
        if _spec is None:
            _spec = Spec()
        return _spec


def check_response(method, path, status, headers, body):
    """Raises OpenApiError (an AssertionError, so the test fails) if openapi.yaml does not
    describe this response. headers: list of (name, value); body: bytes."""
    spec().check(method, path, status, headers, body)
