#!/usr/bin/env python3
"""List the C++ functions longer than --max lines under the given files or folders.

    scripts/long_functions.py --max 80 train            # exit 1 if any function is over 80 lines
    scripts/long_functions.py --max 0 train/trainer.cpp  # every function with its length

A function's length runs from the line of its name to the line of its closing brace, both
included. Lambdas count inside the function that holds them (and are listed as
"<lambda in NAME>" when one alone is over the limit). Functions are found with Universal Ctags
(`ctags --fields=+ne --kinds-C++=f`, which gives each definition's first and last line) when it
is installed, else with a small brace-matching scan of the source (comments, strings and
character literals removed first).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

SOURCE_EXT = (".cpp", ".cc", ".cxx", ".h", ".hpp", ".cu", ".cuh")


def source_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.join(root, f)


# ---- Universal Ctags ----

def functions_ctags(path):
    """(name, first line, last line) of every function definition ctags finds in `path`."""
    out = subprocess.run(["ctags", "--fields=+ne", "--kinds-C++=f", "--language-force=C++", "-o", "-", path],
                         check=True, capture_output=True, text=True).stdout
    found = []
    for row in out.splitlines():
        cols = row.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" not in fields or "end" not in fields:
            continue
        name = cols[0]
        if name.startswith("__anon"):  # a lambda: ctags names it after its scope
            name = "<lambda in %s>" % fields.get("function", "?").split("::")[-1]
        else:
            scope = fields.get("class") or fields.get("struct")
            if scope:
                name = scope.split("::")[-1] + "::" + name
        found.append((name, int(fields["line"]), int(fields["end"])))
    return found


# ---- the fallback: brace matching ----

def blank_out(text):
    """`text` with comments, preprocessor lines, string and character literals replaced by spaces
    (newlines kept)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|^[ \t]*#(?:\\\n|[^\n])*|R"(?P<d>[^(]*)\(.*?\)(?P=d)"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                         re.S | re.M)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def functions_braces(path):
    """(name, first line, last line) of the function bodies at namespace or class scope: a `{`
    whose statement has a parameter list and is no class, namespace, enum or initializer."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_out(f.read())
    found = []
    stack = []  # per open brace: (is a function body, name, first line)
    stmt_start = 0
    for i, ch in enumerate(text):
        if ch in ";{}" and not (stack and stack[-1][0]):
            if ch == "{":
                stmt = text[stmt_start:i]
                head = stmt.strip()
                is_scope = re.match(r"(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b", head, re.S)
                name = re.search(r"([~\w:]+(?:operator\s*\S+)?)\s*\((?:[^()]|\([^()]*\))*\)[^()=]*$", stmt, re.S)
                is_function = bool(name) and not is_scope and not head.endswith("=")
                line = text.count("\n", 0, stmt_start + (name.start(1) if name else 0)) + 1
                stack.append((is_function, name.group(1) if is_function else "", line))
            elif ch == "}" and stack:
                stack.pop()
            stmt_start = i + 1
        elif ch == "{":
            stack.append((True, "", 0))  # a block inside a function body
        elif ch == "}" and stack:
            is_function, name, line = stack.pop()
            if name:
                found.append((name, line, text.count("\n", 0, i) + 1))
                stmt_start = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, default=80, help="longest allowed function, in lines (default 80)")
    ap.add_argument("--no-ctags", action="store_true", help="use the brace-matching scan even if ctags is installed")
    ap.add_argument("paths", nargs="+", help="files or folders (searched for C++ sources)")
    args = ap.parse_args()
    use_ctags = shutil.which("ctags") is not None and not args.no_ctags
    find = functions_ctags if use_ctags else functions_braces
    over = []
    for path in source_files(args.paths):
        for name, first, last in find(path):
            length = last - first + 1
            if length > args.max:
                over.append((length, path, first, name))
    # a lambda over the limit sits in a function over the limit: list it only when that one is not
    outer = {(p, n.split("::")[-1]) for _, p, _, n in over}
    over = [o for o in over if not (o[3].startswith("<lambda in ") and (o[1], o[3][11:-1]) in outer)]
    for length, path, first, name in sorted(over, key=lambda o: (-o[0], o[1], o[2])):
        print("%5d  %s:%d  %s" % (length, path, first, name))
    print("%d function(s) over %d lines (%s)" % (len(over), args.max, "ctags" if use_ctags else "brace scan"),
          file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
