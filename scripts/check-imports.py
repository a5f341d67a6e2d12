#!/usr/bin/env python3
"""Fail on import cycles between the source files of every workspace crate.

For each crate target (src/lib.rs, src/main.rs, src/bin/*, tests/*, benches/*,
examples/*) the module tree is read from its `mod` declarations, and a graph is
built whose nodes are files and whose edges are imports:

* `use` paths (use trees expanded), and paths in code such as
  `crate::a::b::f(...)`, starting with `crate`, `super`, `self`, or the name
  of a child module declared in the current module (`b1::run` in a `mod.rs`
  that says `mod b1;`);
* `mod x;` is not an import: a parent declaring a child does not depend on
  it, and the child does not depend on its parent until it uses something of
  it.

A path resolves to the file of the longest prefix that is a module: `crate::a::b`
is `src/a/b.rs` (or `src/a/b/mod.rs`) when `b` is a module, else `b` is an item
of `src/a.rs` (or `src/a/mod.rs`). An inline module (`mod tests { ... }`) is
part of its file, so a test module's `use super::*` is the file importing
itself and is no edge. Comments and string literals are ignored (doc links are
no imports), and so are visibilities (`pub(crate)`, `pub(super)`).

Every strongly connected component of more than one file is a cycle. The
script prints each with the import lines that form it and exits 1, unless
the component is listed in KNOWN_CYCLES below. A listed cycle that is gone
(or changed) fails too, so that the list stays exact.

Folders, too: in every folder of a crate, each entry (a file, or a
subfolder with its `name.rs` or `mod.rs`) is a room, and the rooms' imports
must not run in a circle, however long. A crate whose `switch/` imports
`cores/` while `cores/` imports `switch/` fails, even when no two files
import each other: a lower room never imports a higher one. KNOWN_ROOM_CYCLES
lists the circles still to be broken, exactly, as KNOWN_CYCLES does files.

Usage: python3 scripts/check-imports.py [--verbose]   (from anywhere)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Cycles allowed to stay, each the exact set of files (relative to the
# repository root) of a strongly connected component of the import graph.
# Empty: every crate is free of file-level import cycles. Never add an entry
# for new code; the mechanism stays for a cycle that cannot be broken at once,
# with a comment saying why.
KNOWN_CYCLES: list[tuple[str, ...]] = []

# Circles between the rooms of a folder still to be broken: (folder relative
# to the repository root, the rooms in the circle). Issue 25 gives the daemon
# crate rooms without them; until it has, this one is listed so that no new
# circle can join it unseen (frames, net and offload left theirs when the
# wire format became its own crate; metrics and switch when the metrics stopped
# importing the core manager). The list only shrinks: a listed circle
# that changed or is gone fails.
KNOWN_ROOM_CYCLES: list[tuple[str, tuple[str, ...]]] = []

KEYWORD_STARTS = {"crate", "super", "self"}


@dataclass
class Module:
    """A module: the file it lives in and its child modules by name."""

    path: tuple[str, ...]
    file: Path
    children: dict[str, Module] = field(default_factory=dict)
    parent: Module | None = None
    inline: bool = False
    glob_super: bool = False


@dataclass
class Tok:
    """A token of stripped source: an identifier, `::` or one character."""

    text: str
    line: int


# ---------------------------------------------------------------- lexing


def strip(src: str) -> str:
    """`src` with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)

    def blank(s: str) -> str:
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif c in "bcr" and not _ident_before(src, i) and (m := RAW_STRING.match(src, i)):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(blank(src[i:j]))
            i = j
        elif c == '"' or (c in "bc" and src.startswith('"', i + 1) and not _ident_before(src, i)):
            j = i + (1 if c == '"' else 2)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(blank(src[i : j + 1]))
            i = j + 1
        elif c == "'":
            m = CHAR.match(src, i)
            if m:
                out.append(blank(m.group(0)))
                i = m.end()
            else:  # a lifetime or a label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')
CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


def _ident_before(src: str, i: int) -> bool:
    return i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")


TOKEN = re.compile(r"r#[A-Za-z_][A-Za-z0-9_]*|\$?[A-Za-z_][A-Za-z0-9_]*|::|\S")


def tokens(src: str) -> list[Tok]:
    out = []
    for lineno, line in enumerate(strip(src).split("\n"), 1):
        for m in TOKEN.finditer(line):
            t = m.group(0)
            if t.startswith("r#"):
                t = t[2:]
            elif t == "$crate":
                t = "crate"
            out.append(Tok(t, lineno))
    return out


def is_ident(t: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t))


# ---------------------------------------------------------------- module tree


def mod_decls(toks: list[Tok]):
    """Yield (index, name, inline) for every `mod name;` / `mod name {`."""
    for i, t in enumerate(toks):
        if t.text == "mod" and i + 2 < len(toks) and is_ident(toks[i + 1].text):
            nxt = toks[i + 2].text
            if nxt in (";", "{"):
                yield i, toks[i + 1].text, nxt == "{"


def child_file(dir_: Path, name: str) -> Path | None:
    for p in (dir_ / f"{name}.rs", dir_ / name / "mod.rs"):
        if p.is_file():
            return p
    return None


class Crate:
    """One crate target: its module tree and the tokens of each file."""

    def __init__(self, label: str, root_file: Path):
        self.label = label
        self.root = Module((), root_file)
        self.files: dict[Path, list[Tok]] = {}
        # The module (inline ones included) each token of a file is in.
        self.where: dict[Path, list[Module]] = {}
        self.problems: list[str] = []
        self._load(self.root, root_file.parent)

    def _load(self, module: Module, child_dir: Path) -> None:
        """Read `module`'s file; children of the file's outermost module live in `child_dir`."""
        toks = tokens(module.file.read_text(encoding="utf-8"))
        self.files[module.file] = toks
        where: list[Module] = self.where.setdefault(module.file, [])
        # Inline modules: follow braces to know which module each token is in.
        stack: list[Module | None] = []
        current = module
        pending: dict[int, tuple[str, bool]] = {i: (n, il) for i, n, il in mod_decls(toks)}
        i = 0
        while i < len(toks):
            t = toks[i].text
            if i in pending:
                name, inline = pending[i]
                where.extend([current] * 3)
                if inline:
                    child = Module(current.path + (name,), module.file, parent=current, inline=True)
                    current.children[name] = child
                    stack.append(current)
                    current = child
                    i += 3  # past `mod name {`
                    continue
                d = child_dir.joinpath(*current.path[len(module.path) :])
                f = child_file(d, name)
                if f is None:
                    self.problems.append(
                        f"{rel(module.file)}:{toks[i].line}: `mod {name};` has no file in {rel(d)}"
                    )
                else:
                    child = Module(current.path + (name,), f, parent=current)
                    current.children[name] = child
                    self._load(child, f.parent if f.name == "mod.rs" else f.with_suffix(""))
                i += 3
                continue
            where.append(current)
            if t == "{":
                stack.append(None)
            elif t == "}" and stack:
                top = stack.pop()
                if top is not None:
                    current = top
            i += 1


# ---------------------------------------------------------------- imports


def use_tree(toks: list[Tok], i: int, prefix: list[str], out: list[list[str]]) -> int:
    """Parse a use tree at `toks[i]`; append full paths to `out`; return the next index."""
    path = list(prefix)
    if toks[i].text == "::":
        i += 1
    while i < len(toks):
        t = toks[i].text
        if t == "{":
            i += 1
            while toks[i].text != "}":
                i = use_tree(toks, i, path, out)
                if toks[i].text == ",":
                    i += 1
            i += 1
            return i
        if t == "*":
            out.append(path + ["*"])
            return i + 1
        if t == "self" and path:
            # `a::{self, ...}`: `a` itself.
            out.append(list(path))
            i += 1
            break
        if is_ident(t):
            path.append(t)
            i += 1
            if i < len(toks) and toks[i].text == "::":
                i += 1
                continue
            out.append(path)
            break
        break
    if i + 1 < len(toks) and toks[i].text == "as":
        i += 2
    return i


@dataclass
class Edge:
    src: Path
    dst: Path
    line: int
    path: str


def lookup_child(m: Module, name: str) -> Module | None:
    """A child module named `name` visible in `m` (through `use super::*` of inline modules)."""
    while m is not None:
        if name in m.children:
            return m.children[name]
        if not (m.inline and m.glob_super):
            return None
        m = m.parent
    return None


def resolve(crate: Crate, m: Module, segs: list[str]) -> Module | None:
    """The module whose file a path from module `m` lands in, or None (extern or unknown)."""
    if not segs:
        return None
    first, rest = segs[0], segs[1:]
    if first == "crate":
        cur = crate.root
    elif first in ("super", "self"):
        cur = m
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                if cur.parent is None:
                    return None
                cur = cur.parent
            segs = segs[1:]
        rest = segs
    else:
        cur = lookup_child(m, first)
        if cur is None:
            return None
    for s in rest:
        if s in cur.children:
            cur = cur.children[s]
        else:
            break
    return cur


def imports(crate: Crate) -> list[Edge]:
    edges = []
    for file, toks in crate.files.items():
        where = crate.where[file]
        # Inline modules that glob-import their parent see its child modules.
        for i, t in enumerate(toks):
            if t.text == "use" and i + 3 < len(toks):
                if [x.text for x in toks[i + 1 : i + 4]] == ["super", "::", "*"]:
                    where[i].glob_super = True
        paths: list[tuple[int, list[str]]] = []
        i = 0
        while i < len(toks):
            t = toks[i].text
            if t == "pub" and i + 1 < len(toks) and toks[i + 1].text == "(":
                j = i + 2
                while j < len(toks) and toks[j].text != ")":
                    j += 1
                i = j + 1
                continue
            if t == "use":
                out: list[list[str]] = []
                j = use_tree(toks, i + 1, [], out)
                paths.extend((i, p) for p in out)
                i = max(j, i + 1)
                continue
            prev = toks[i - 1].text if i else ""
            if (
                is_ident(t)
                and prev != "::"
                and i + 1 < len(toks)
                and toks[i + 1].text == "::"
                and (t in KEYWORD_STARTS or lookup_child(where[i], t) is not None)
            ):
                segs = [t]
                j = i + 1
                while j + 1 < len(toks) and toks[j].text == "::" and is_ident(toks[j + 1].text):
                    segs.append(toks[j + 1].text)
                    j += 2
                paths.append((i, segs))
                i = j
                continue
            i += 1
        for i, segs in paths:
            target = resolve(crate, where[i], segs)
            if target is not None and target.file != file:
                edges.append(Edge(file, target.file, toks[i].line, "::".join(segs)))
    return edges


# ---------------------------------------------------------------- cycles


def sccs(nodes: list[Path], succ: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    on, stack, out = set(), [], []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def shortest_cycle(start: Path, succ: dict[Path, set[Path]], inside: set[Path]) -> list[Path]:
    """A shortest path from `start` back to itself within `inside` (breadth first)."""
    prev: dict[Path, Path] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ.get(v, ())):
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] if v != start else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


# ---------------------------------------------------------------- workspace


def members() -> list[Path]:
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    try:
        import tomllib

        names = tomllib.loads(text)["workspace"]["members"]
    except ImportError:  # Python < 3.11
        m = re.search(r"^members\s*=\s*\[(.*?)\]", text, re.S | re.M)
        names = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    return [ROOT / n for n in names]


def targets(pkg: Path) -> list[tuple[str, Path]]:
    out = []
    for f in ("src/lib.rs", "src/main.rs"):
        if (pkg / f).is_file():
            out.append((f"{pkg.name} ({f})", pkg / f))
    for kind in ("src/bin", "tests", "benches", "examples"):
        d = pkg / kind
        if d.is_dir():
            for f in sorted(d.glob("*.rs")):
                out.append((f"{pkg.name} ({kind}/{f.name})", f))
            for f in sorted(d.glob("*/main.rs")):
                out.append((f"{pkg.name} ({kind}/{f.parent.name})", f))
    return out


def room_of(p: Path, folder: Path) -> str | None:
    """The room of `folder` that file `p` is in (the first name below
    `folder`, without `.rs`); None outside it, and for the folder's own
    `mod.rs`."""
    if not p.is_relative_to(folder) or p == folder / "mod.rs":
        return None
    first = p.relative_to(folder).parts[0]
    return first[:-3] if first.endswith(".rs") else first


def room_cycles(
    files: list[Path], edges: list[Edge], src_root: Path
) -> list[tuple[tuple[str, tuple[str, ...]], str]]:
    """Circles between the rooms of every folder under `src_root` (see the
    module documentation): each as its KNOWN_ROOM_CYCLES key and a message
    with the imports that cross between its rooms."""
    out = []
    folders = {f.parent for f in files} | {src_root}
    for folder in sorted(folders):
        if not folder.is_relative_to(src_root):
            continue

        succ: dict[str, set[str]] = {}
        crossing: dict[tuple[str, str], list[str]] = {}
        for e in edges:
            a, b = room_of(e.src, folder), room_of(e.dst, folder)
            if a is None or b is None or a == b:
                continue
            succ.setdefault(a, set()).add(b)
            crossing.setdefault((a, b), []).append(f"{rel(e.src)}:{e.line}: {e.path}")
        rooms = sorted({r for pair in crossing for r in pair})
        for comp in sccs(rooms, succ):
            inside = set(comp)
            lines = [
                f"    {a} -> {b}: " + "; ".join(dict.fromkeys(ls))
                for (a, b), ls in sorted(crossing.items())
                if a in inside and b in inside
            ]
            key = (rel(folder), tuple(comp))
            out.append(
                (
                    key,
                    f"rooms of {rel(folder)}/ import each other in a circle: "
                    f"{', '.join(comp)}; the imports between them:\n" + "\n".join(lines),
                )
            )
    return out


def main() -> int:
    verbose = "--verbose" in sys.argv[1:]
    known = {frozenset(c) for c in KNOWN_CYCLES}
    known_rooms = {(folder, tuple(sorted(rooms))) for folder, rooms in KNOWN_ROOM_CYCLES}
    seen_rooms: set[tuple[str, tuple[str, ...]]] = set()
    seen: set[frozenset[str]] = set()
    failures: list[str] = []
    n_files = n_edges = 0
    for pkg in members():
        for label, root_file in targets(pkg):
            crate = Crate(label, root_file)
            failures.extend(crate.problems)
            edges = imports(crate)
            n_files += len(crate.files)
            n_edges += len(edges)
            succ: dict[Path, set[Path]] = {}
            for e in edges:
                succ.setdefault(e.src, set()).add(e.dst)
            src_root = root_file.parent
            if src_root.name == "src":
                for key, message in room_cycles(sorted(crate.files), edges, src_root):
                    if key in known_rooms:
                        seen_rooms.add(key)
                    else:
                        failures.append(f"{label}: {message}")
            for comp in sccs(sorted(crate.files), succ):
                key = frozenset(rel(p) for p in comp)
                inside = set(comp)
                grouped: dict[tuple[str, int, str], list[str]] = {}
                for e in edges:
                    if e.src in inside and e.dst in inside:
                        grouped.setdefault((rel(e.src), e.line, rel(e.dst)), []).append(e.path)
                lines = [
                    f"    {src}:{line}: {', '.join(dict.fromkeys(ps))}  ->  {dst}"
                    for (src, line, dst), ps in sorted(grouped.items())
                ]
                if key in known:
                    seen.add(key)
                    if verbose:
                        print(f"known cycle in {label}: {', '.join(sorted(key))}")
                    continue
                loop = " -> ".join(rel(p) for p in shortest_cycle(comp[0], succ, inside))
                failures.append(
                    f"import cycle in {label} between {len(comp)} files, e.g. {loop}; "
                    "the imports inside it:\n" + "\n".join(lines)
                )
    for c in sorted(known - seen, key=sorted):
        failures.append(
            "KNOWN_CYCLES lists a cycle that no longer exists (or changed): "
            f"{', '.join(sorted(c))}; remove or update the entry"
        )
    for folder, rooms in sorted(known_rooms - seen_rooms):
        failures.append(
            "KNOWN_ROOM_CYCLES lists a circle that no longer exists (or changed): "
            f"{folder}: {', '.join(rooms)}; remove or update the entry"
        )
    if failures:
        for f in failures:
            print(f"check-imports: {f}", file=sys.stderr)
        print(f"check-imports: FAILED ({len(failures)} problem(s))", file=sys.stderr)
        return 1
    print(
        f"check-imports: no new import cycles ({n_files} files, {n_edges} imports, "
        f"{len(known)} known cycle(s); no new circle between folders' rooms, "
        f"{len(known_rooms)} known)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
