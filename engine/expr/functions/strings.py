"""String functions with DuckDB's semantics, and LIKE / ILIKE.

DuckDB's string functions count characters (code points), as Arrow's utf8_* kernels do.
Their non-string parameters (positions, widths, patterns) are nearly always constants:
a kernel runs once per batch with them; a parameter that is a column runs the kernel
once per distinct parameter value (still vectorized), see :func:`_per_params`. A NULL
operand gives NULL; a non-text operand is cast to VARCHAR as DuckDB casts it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from eddies.engine.expr.casts import cast_to, convert
from eddies.engine.expr.guarded import NullFolded
from eddies.engine.expr.operators import not_
from eddies.engine.expr.registry import Site, register, register_kernels
from eddies.engine.expr.types import is_stringy, plain
from eddies.errors import UnsupportedQueryError, describe
from eddies.router.expressions import Expr

_STR = pa.string()


def _repeat(v: Any, n: Any) -> Any:
    """``repeat(s, n)``: ``s`` repeated ``n`` times, '' for ``n <= 0``, NULL if either is."""
    n = plain(n)
    if n.type == pa.null():
        n = cast_to(n, pa.int64())
    if not pa.types.is_integer(n.type):
        raise TypeError(f"repeat needs an integer count, not {n.type}")
    count = pc.max_element_wise(cast_to(n, pa.int64()), pa.scalar(0, pa.int64()), skip_nulls=False)
    text = _null_as_text(v)
    if isinstance(count, pa.Scalar) and not count.is_valid:  # Arrow makes a broken array
        return (
            pa.scalar(None, text.type)
            if isinstance(text, pa.Scalar)
            else pa.nulls(len(text), text.type)
        )
    return pc.binary_repeat(text, count)


def _null_as_text(v: Any) -> Any:
    """A string function's operand with a NULL literal typed as VARCHAR (DuckDB's NULL
    casts to any type: ``upper(NULL)`` is NULL); other types as they are."""
    v = plain(v)
    return cast_to(v, pa.string()) if v.type == pa.null() else v


def _text(v: Any) -> Any:
    """A string operand: dictionary decoded, NULL typed as VARCHAR, other types cast as
    DuckDB casts them to VARCHAR."""
    v = plain(v)
    if v.type == pa.null():
        return cast_to(v, pa.string())
    return convert(v, pa.string())  # large_string too: one result type


def _per_params(
    kernel: Callable[..., Any], out_type: pa.DataType, n_text: int = 1
) -> Callable[..., Any]:
    """Call ``kernel(*texts, *params)`` with ``params`` as Python values.

    The first ``n_text`` operands are string columns or scalars; the rest are parameters.
    Where a parameter is NULL the result is NULL. Where parameters are arrays, the kernel
    runs once per distinct combination and the results are merged by mask.
    """

    def fn(*values: Any) -> Any:
        from eddies.router.expressions import broadcast

        lengths = [len(v) for v in values if not isinstance(v, pa.Scalar)]
        n = max(lengths, default=1)
        texts = [broadcast(_text(v), n) for v in values[:n_text]]  # kernels want arrays
        params = [plain(p) for p in values[n_text:]]
        if all(isinstance(p, pa.Scalar) for p in params):
            if not all(p.is_valid for p in params):
                out = pa.nulls(n, out_type)
            else:
                out = kernel(*texts, *[p.as_py() for p in params])
        else:
            cols = [broadcast(p, n) for p in params]
            names = [f"p{i}" for i in range(len(cols))]
            table = pa.table(dict(zip(names, cols, strict=True)))
            out = pa.nulls(n, out_type)
            for row in table.group_by(names).aggregate([]).to_pylist():
                if any(row[k] is None for k in names):
                    continue  # a NULL parameter: the result stays NULL
                mask = pc.equal(cols[0], pa.scalar(row["p0"], cols[0].type))
                for k, col in zip(names[1:], cols[1:], strict=True):
                    mask = pc.and_(mask, pc.equal(col, pa.scalar(row[k], col.type)))
                result = kernel(*texts, *[row[k] for k in names])
                out = pc.if_else(pc.fill_null(mask, False), result, out)
        return out if lengths else out[0]

    return fn


def _slice(s: Any, start: int, stop: int | None) -> Any:
    """Characters ``[start, stop)`` (0-based, Python slice rules)."""
    return pc.utf8_slice_codeunits(s, start, stop if stop is not None else 2**62)


def _from_end(s: Any, start: int, stop: int | None) -> Any:
    """Characters ``[start, stop)`` counted 0-based from the end of the string."""
    return pc.utf8_reverse(_slice(pc.utf8_reverse(s), start, stop))


def _substring(s: Any, start: int, length: int | None = None) -> Any:
    """``_substring(s, start[, length])`` as DuckDB: 1-based; a negative start counts from
    the end (-1 is the last character); a negative length takes the characters before
    ``start``; the range is clipped to the string. Negative starts are taken on the
    reversed string so that no per-row length is needed."""
    if start >= 0:
        if length is None:
            return _slice(s, max(start - 1, 0), None)
        lo, hi = (start, start + length) if length >= 0 else (start + length, start)
        return _slice(s, max(lo - 1, 0), max(hi - 1, 0))
    p = -start  # position counted from the end, 1 = last
    if length is None:
        return _from_end(s, 0, p)
    lo, hi = (p - length, p) if length >= 0 else (p, p - length)
    return _from_end(s, max(lo, 0), max(hi, 0))


def _left(s: Any, k: int) -> Any:
    """``left(s, k)``: the first k characters; k < 0 drops the last -k."""
    if k >= 0:
        return _slice(s, 0, k)
    return _from_end(s, -k, None)


def _right(s: Any, k: int) -> Any:
    """``right(s, k)``: the last k characters; k < 0 drops the first -k."""
    if k >= 0:
        return _from_end(s, 0, k)
    return _slice(s, -k, None)


def _pad(left: bool) -> Callable[[Any, int, str], Any]:
    """``lpad``/``rpad(s, width, fill)`` as DuckDB: longer strings are cut to ``width``
    characters; the fill pattern repeats (and is cut) to the width; an empty pattern that
    would be needed is an error."""

    def fn(s: Any, width: int, fill: str) -> Any:
        width = max(width, 0)
        cut = _slice(s, 0, width)
        missing = pc.subtract(
            pa.scalar(width, pa.int64()), pc.cast(pc.utf8_length(cut), pa.int64())
        )
        if not fill:
            if (
                pc.any(pc.greater(missing, 0)).as_py()
                if isinstance(missing, pa.Array)
                else (missing.is_valid and missing.as_py() > 0)
            ):
                raise pa.ArrowInvalid(f"Insufficient padding in {'LPAD' if left else 'RPAD'}")
            return cut
        m = len(fill)
        whole = pc.binary_repeat(pa.scalar(fill), pc.divide(missing, m))
        rem = pc.subtract(missing, pc.multiply(pc.divide(missing, m), m))
        part = pa.scalar("", pa.string())
        for r in range(1, m):  # the cut-off end of the pattern: m distinct lengths at most
            part = pc.if_else(pc.equal(rem, r), pa.scalar(fill[:r]), part)
        padding = pc.binary_join_element_wise(whole, part, "")
        pieces = (padding, cut) if left else (cut, padding)
        return pc.cast(pc.binary_join_element_wise(*pieces, ""), s.type)

    return fn


def _integer_width(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``lpad``/``rpad`` take an INTEGER width, as DuckDB's: a BIGINT (or UINTEGER and
    wider) one is refused there (no implicit narrowing), so it is here."""

    def checked(s: Any, width: Any, fill: Any) -> Any:
        t = plain(width).type
        if pa.types.is_integer(t) and (t.bit_width > 32 or t == pa.uint32()):
            raise TypeError(f"the width of lpad/rpad must be an INTEGER, not {t}; CAST it")
        return fn(s, width, fill)

    return checked


def _split_part(s: Any, delimiter: str, index: int) -> Any:
    """``split_part(s, delimiter, index)``: the index-th field (1-based; negative counts from
    the end); '' where there is no such field; an empty delimiter splits into characters."""
    if index == 0:
        return pc.if_else(pc.is_valid(s), pa.scalar("", s.type), pa.scalar(None, s.type))
    if delimiter == "":
        return _substring(s, index, 1)
    parts = pc.split_pattern(s, delimiter)
    count = pc.list_value_length(parts)
    if index > 0:  # one field or none per row: a list of at most one, joined with ''
        return pc.binary_join(pc.list_slice(parts, index - 1, index), "")
    # Negative index: fields counted from the end. A one-character delimiter splits the
    # reversed string the same way; a longer one may overlap itself, so rows are taken per
    # distinct field count instead (vectorized per count).
    if len(delimiter) == 1:
        rparts = pc.split_pattern(pc.utf8_reverse(s), delimiter)
        return pc.utf8_reverse(pc.binary_join(pc.list_slice(rparts, -index - 1, -index), ""))
    out = pc.if_else(pc.is_valid(s), pa.scalar("", s.type), pa.scalar(None, s.type))
    for c in pc.unique(count).to_pylist():
        if c is None or c + index < 0:
            continue
        field = pc.binary_join(pc.list_slice(parts, c + index, c + index + 1), "")
        out = pc.if_else(pc.fill_null(pc.equal(count, c), False), field, out)
    return out


def _strpos(s: Any, sub: str) -> Any:
    """``strpos(s, sub)``: 1-based character position of the first occurrence, 0 if none."""
    if sub == "":
        return pc.if_else(pc.is_valid(s), pa.scalar(1, pa.int64()), pa.scalar(None, pa.int64()))
    before = pc.split_pattern(s, sub, max_splits=1)
    found = pc.equal(pc.list_value_length(before), 2)
    head = pc.cast(pc.utf8_length(pc.list_element(before, 0)), pa.int64())
    return pc.if_else(found, pc.add(head, pa.scalar(1, pa.int64())), pa.scalar(0, pa.int64()))


def _replace(s: Any, old: str, new: str) -> Any:
    """``replace(s, old, new)``: every occurrence; an empty ``old`` changes nothing."""
    if old == "":
        return s
    return pc.replace_substring(s, old, new)


def _trim(where: str) -> Callable[..., Any]:
    """``trim``/``ltrim``/``rtrim(s[, characters])``: by default spaces only, as DuckDB."""
    kernel = {"both": pc.utf8_trim, "leading": pc.utf8_ltrim, "trailing": pc.utf8_rtrim}[where]

    def fn(s: Any, characters: str = " ") -> Any:
        return kernel(s, characters)

    return fn


def _join_skipping_nulls(*values: Any) -> Any:
    """``texts`` (all but the last operand) joined with the separator (the last, a Python
    str), NULL texts skipped; '' if all are NULL.

    Each present text gets the separator in front and the first separator is cut off.
    (Arrow's ``null_handling="skip"`` is not used: in pyarrow 26 it drops the rows where
    every value is NULL, returning a shorter array.)"""
    *texts, sep = values
    prefixed = [
        pc.if_else(pc.is_valid(t), pc.binary_join_element_wise(sep, t, ""), "") for t in texts
    ]
    joined = prefixed[0] if len(prefixed) == 1 else pc.binary_join_element_wise(*prefixed, "")
    return pc.utf8_slice_codeunits(joined, len(sep), 2**62)


def _concat_fn(*values: Any) -> Any:
    """``concat(...)``: every argument as VARCHAR, NULLs skipped (all NULL gives '')."""
    return _per_params(_join_skipping_nulls, pa.string(), len(values))(*values, pa.scalar(""))


def _concat_ws(sep: Any, *values: Any) -> Any:
    """``concat_ws(sep, ...)``: NULL arguments skipped; NULL if the separator is."""
    return _per_params(_join_skipping_nulls, pa.string(), len(values))(*values, _text(sep))


_REGEX_FLAGS = {"c": "", "i": "i", "s": "s", "g": ""}


def _regex(pattern: str, flags: str | None) -> tuple[str, bool]:
    """A pattern with DuckDB's option letters applied as RE2 inline flags; and whether
    ``g`` (replace every match) was given. Options DuckDB does not know are errors."""
    flags = flags or ""
    inline = ""
    for f in flags:
        if f in "mnpl":  # DuckDB's newline-sensitive and literal options
            raise pa.ArrowInvalid(f"regex option {f!r} is not supported by eddies")
        if f not in _REGEX_FLAGS:
            raise pa.ArrowInvalid(f"Unrecognized Regex option {f}")
        inline = inline.replace("i", "") if f == "c" else inline + _REGEX_FLAGS[f]
    return (f"(?{inline}){pattern}" if inline else pattern), "g" in flags


def _regexp_matches(s: Any, pattern: str, flags: str | None = None) -> Any:
    """``regexp_matches(s, pattern[, options])``: true if the RE2 pattern matches anywhere."""
    pattern, every = _regex(pattern, flags)
    if every:
        raise pa.ArrowInvalid("Option 'g' (global replace) is only valid for regexp_replace")
    return pc.match_substring_regex(s, pattern)


def _regexp_replace(s: Any, pattern: str, replacement: str, flags: str | None = None) -> Any:
    """``regexp_replace(s, pattern, replacement[, options])``: the first match (every
    match with option ``g``) replaced; ``\\1`` names a group (RE2 rewrite syntax)."""
    pattern, every = _regex(pattern, flags)
    return pc.replace_substring_regex(
        s, pattern, replacement, max_replacements=None if every else 1
    )


def _regexp_extract(s: Any, pattern: str, group: int = 0) -> Any:
    """``regexp_extract(s, pattern[, group])``: the group of the first match ('' if there is
    no match, or the group did not take part or does not exist); group 0..9."""
    if not 0 <= group <= 9:
        raise pa.ArrowInvalid("Group index must be between 0 and 9!")
    matched = pc.match_substring_regex(s, pattern)  # raises on a bad pattern
    # Match the whole string around the first match and rewrite it to the wanted group.
    whole = f"^(?s:.*?)({pattern})(?s:.*)$"
    try:
        picked = pc.replace_substring_regex(s, whole, f"\\{group + 1}", max_replacements=1)
    except pa.ArrowInvalid:  # the group does not exist: DuckDB gives ''
        picked = pc.if_else(pc.is_valid(s), pa.scalar("", s.type), pa.scalar(None, s.type))
    return pc.if_else(matched, picked, pa.scalar("", s.type))


def _starts_with(s: Any, prefix: str) -> Any:
    return pc.starts_with(s, prefix)


def _contains(s: Any, needle: str) -> Any:
    return pc.match_substring(s, needle)


def _like(pattern: str, escape: str | None, ignore_case: bool) -> Callable[[Any], Any]:
    """``LIKE``/``ILIKE`` as DuckDB: no escape character unless ``ESCAPE`` names one.

    Arrow's ``match_like`` treats a backslash as an escape, so literal backslashes are
    doubled and the ESCAPE character becomes a backslash."""
    if escape is not None and len(escape) != 1:
        raise UnsupportedQueryError(f"LIKE ... ESCAPE needs one character, got {escape!r}")
    out: list[str] = []
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            nxt = next(chars, None)
            if nxt is None:
                raise UnsupportedQueryError(
                    f"LIKE pattern {pattern!r} ends with its escape character {escape!r}"
                )
            out.append("\\" + nxt)
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    arrow_pattern = "".join(out)

    def fn(v: Any) -> Any:
        v = plain(v)
        if v.type == pa.null():
            return pa.scalar(None, pa.bool_())
        return pc.match_like(v, arrow_pattern, ignore_case=ignore_case)

    return fn


def _unknown_match(v: Any) -> Any:
    """``v LIKE NULL``: a NULL BOOLEAN per row; ``v`` must still be text (or NULL)."""
    v = plain(v)
    if not (is_stringy(v.type) or v.type == pa.null()):
        raise TypeError(f"LIKE needs text, got {v.type}")
    if isinstance(v, pa.Scalar):
        return pa.scalar(None, pa.bool_())
    return pa.nulls(len(v), pa.bool_())


register_kernels(
    {
        exp.Lower: lambda v: pc.utf8_lower(_null_as_text(v)),
        exp.Upper: lambda v: pc.utf8_upper(_null_as_text(v)),
        exp.Length: lambda v: pc.utf8_length(_null_as_text(v)),
        exp.Reverse: lambda v: pc.utf8_reverse(_null_as_text(v)),
    }
)


@register(exp.Repeat)
def _compile_repeat(node: exp.Repeat, site: Site) -> Expr:
    return site.call(_repeat, [site.compile(node.this), site.compile(node.args["times"])])


@register(exp.Substring)
def _compile_substring(node: exp.Substring, site: Site) -> Expr:
    return site.call(_per_params(_substring, _STR), site.ops("this", "start", "length"))


@register(exp.Trim)
def _compile_trim(node: exp.Trim, site: Site) -> Expr:
    where = str(node.args.get("position") or "both").lower()
    return site.call(_per_params(_trim(where), _STR), site.ops("this", "expression"))


@register(exp.ConcatWs)
def _compile_concat_ws(node: exp.ConcatWs, site: Site) -> Expr:
    return site.call(_concat_ws, site.arguments())


@register(exp.Concat)
def _compile_concat(node: exp.Concat, site: Site) -> Expr:
    return site.call(_concat_fn, site.arguments())


@register(exp.Replace)
def _compile_replace(node: exp.Replace, site: Site) -> Expr:
    operands = site.ops("this", "expression", "replacement")
    return site.call(_per_params(_replace, _STR), operands)


@register(exp.Left, exp.Right)
def _compile_left_right(node: exp.Left | exp.Right, site: Site) -> Expr:
    kernel = _left if isinstance(node, exp.Left) else _right
    return site.call(_per_params(kernel, _STR), site.ops("this", "expression"))


@register(exp.Pad)
def _compile_pad(node: exp.Pad, site: Site) -> Expr:
    kernel = _integer_width(_per_params(_pad(bool(node.args.get("is_left"))), _STR))
    return site.call(kernel, site.ops("this", "expression", "fill_pattern"))


@register(exp.SplitPart)
def _compile_split_part(node: exp.SplitPart, site: Site) -> Expr:
    operands = site.ops("this", "delimiter", "part_index")
    return site.call(_per_params(_split_part, _STR), operands)


@register(exp.StrPosition)
def _compile_strpos(node: exp.StrPosition, site: Site) -> Expr:
    return site.call(_per_params(_strpos, pa.int64()), site.ops("this", "substr"))


@register(exp.StartsWith)
def _compile_starts_with(node: exp.StartsWith, site: Site) -> Expr:
    return site.call(_per_params(_starts_with, pa.bool_()), site.ops("this", "expression"))


@register(exp.Contains)
def _compile_contains(node: exp.Contains, site: Site) -> Expr:
    this, needle = node.this, node.expression
    if isinstance(needle, exp.Null) and isinstance(this, exp.Null | exp.Literal):
        # DuckDB cannot choose among contains() for strings, lists and maps
        raise UnsupportedQueryError(f"{describe(node)}: cast the NULL to a type")
    return site.call(_per_params(_contains, pa.bool_()), site.ops("this", "expression"))


@register(exp.RegexpLike)
def _compile_regexp_matches(node: exp.RegexpLike, site: Site) -> Expr:
    operands = site.ops("this", "expression", "flag")
    return site.call(_per_params(_regexp_matches, pa.bool_()), operands)


@register(exp.RegexpReplace)
def _compile_regexp_replace(node: exp.RegexpReplace, site: Site) -> Expr:
    operands = site.ops("this", "expression", "replacement", "modifiers")
    return site.call(_per_params(_regexp_replace, _STR), operands)


@register(exp.RegexpExtract)
def _compile_regexp_extract(node: exp.RegexpExtract, site: Site) -> Expr:
    operands = site.ops("this", "expression", "group")
    return site.call(_per_params(_regexp_extract, _STR), operands)


def _escape_character(node: exp.Expression, escape: exp.Expression) -> str:
    """The ESCAPE character's text; UnsupportedQueryError unless it is a string literal."""
    if not (isinstance(escape, exp.Literal) and escape.is_string):
        raise UnsupportedQueryError(f"{describe(node)}: ESCAPE needs a string literal")
    return escape.this


def _like_call(
    node: exp.Like | exp.ILike, escape: str | None, site: Site, negate: bool = False
) -> Expr:
    """``node`` (a LIKE or ILIKE) compiled, named by ``site``'s SQL."""
    pattern = node.expression
    if isinstance(pattern, exp.Null):  # x LIKE NULL is NULL for every row, as in DuckDB
        fn: Callable[[Any], Any] = _unknown_match
    elif not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise UnsupportedQueryError(f"{describe(node)}: LIKE needs a string literal pattern")
    else:
        fn = _like(pattern.this, escape, isinstance(node, exp.ILike))
    expr: Expr = site.call(fn, [site.compile(node.this)])
    if fn is _unknown_match:
        expr = NullFolded(expr, site.sql)
    if negate:  # NOT LIKE ... ESCAPE: the flag is on the LIKE under the Escape node
        expr = site.call(not_, [expr])
    return expr


@register(exp.Like, exp.ILike)
def _compile_like(node: exp.Like | exp.ILike, site: Site) -> Expr:
    if node.args.get("escape"):
        return _like_call(node, _escape_character(node, node.args["escape"]), site)
    return _like_call(node, None, site)


@register(exp.Escape)
def _compile_escape(node: exp.Escape, site: Site) -> Expr:
    """``[NOT] [I]LIKE ... ESCAPE 'c'``: sqlglot puts the LIKE under an Escape node."""
    like = node.this
    if not isinstance(like, exp.Like | exp.ILike):  # Escape is no function: as the dispatcher
        raise UnsupportedQueryError(f"expression {describe(node)} is not supported")
    escape = _escape_character(node, node.expression)
    return _like_call(like, escape, site, bool(like.args.get("negate")))
