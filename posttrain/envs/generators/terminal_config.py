"""The configuration, build and shell envs of the ``terminal`` suite (see ``terminal`` for the whole suite).

Checks here run only trusted code on the workspace's files (parse an ini, JSON or .env file and print what they
hold) or run the workspace's build and script and compare what comes out; expectations are computed here, and so is
what the untouched workspace already gets right (its guard tests), from the same parsers and the untouched scripts.

Example:
    >>> [e.id for e in specs()][:2]
    ['terminal/config_ini_server', 'terminal/config_ini_worker']
"""

from __future__ import annotations

import configparser
import json
import subprocess
import tempfile
from pathlib import Path

from posttrain.envs.generators.common import guarded, heredoc, workspace_spec

SUITE = "terminal"


def _ini_sections(text: str) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {name: dict(parser[name]) for name in parser.sections()}


def ini_check(path: str) -> str:
    return ("import configparser\nimport json\nimport sys\n\n"
            "parser = configparser.ConfigParser(interpolation=None)\n"
            f"with open({path!r}, encoding='utf-8') as handle:\n    parser.read_file(handle)\n"
            "what = sys.argv[1]\n"
            "if what == 'sections':\n    print(json.dumps(parser.sections()))\n"
            "else:\n    print(json.dumps(dict(parser[what]) if parser.has_section(what) else None, sort_keys=True))\n")


def ini_env(name: str, path: str, buggy: str, fixed: str, reference: str, task: str, split: str):
    sections, before = _ini_sections(fixed), _ini_sections(buggy)
    tests = [{"name": "sections", "cmd": "python3 -I {tests}/ini.py sections", "stdout": json.dumps(list(sections))}]
    tests += [{"name": f"section_{s}", "cmd": f"python3 -I {{tests}}/ini.py {s}",
               "stdout": json.dumps(values, sort_keys=True)} for s, values in sections.items()]
    same = {f"section_{s}" for s, values in sections.items() if before.get(s) == values}
    tests = guarded(tests, same | ({"sections"} if list(before) == list(sections) else set()))
    prompt = f"Edit {path} (an INI file read with Python's configparser): {task}\n"
    return workspace_spec(suite=SUITE, name=name, prompt=prompt, workspace={path: buggy}, reference=reference,
                          files={"ini.py": ini_check(f"/work/{path}")}, tests=tests, runtime="bash", difficulty=1,
                          split=split, tags=["config", "ini"])


SERVER_INI = """[server]
host = 127.0.0.1
port = 8000
debug = true

[database]
url = sqlite:///dev.db
pool_size = 5
"""
SERVER_FIXED = SERVER_INI.replace("127.0.0.1", "0.0.0.0").replace("8000", "8080").replace("debug = true",
                                                                                          "debug = false") + \
    "\n[logging]\nlevel = WARNING\nfile = /var/log/app.log\n"
WORKER_INI = """[worker]
concurrency = 2
queue = default
prefetch = 10

[retry]
max_attempts = 1
"""
WORKER_FIXED = "[worker]\nconcurrency = 8\nqueue = emails\n\n[retry]\nmax_attempts = 5\nbackoff_s = 30\n"


def config_envs():
    server = ini_env(
        "config_ini_server", "config/app.ini", SERVER_INI, SERVER_FIXED,
        "sed -i 's/^host = 127.0.0.1$/host = 0.0.0.0/' config/app.ini\n"
        "sed -i 's/^port = 8000$/port = 8080/' config/app.ini\n"
        "sed -i 's/^debug = true$/debug = false/' config/app.ini\n"
        "printf '\\n[logging]\\nlevel = WARNING\\nfile = /var/log/app.log\\n' >> config/app.ini\n",
        "prepare it for production. In [server], listen on all interfaces (host 0.0.0.0), port 8080, debug false. "
        "Add a [logging] section with level = WARNING and file = /var/log/app.log. Leave [database] as it is.",
        "train")
    worker = ini_env(
        "config_ini_worker", "etc/worker.ini", WORKER_INI, WORKER_FIXED,
        "sed -i 's/^concurrency = 2$/concurrency = 8/' etc/worker.ini\n"
        "sed -i 's/^queue = default$/queue = emails/' etc/worker.ini\n"
        "sed -i '/^prefetch = /d' etc/worker.ini\n"
        "sed -i 's/^max_attempts = 1$/max_attempts = 5\\nbackoff_s = 30/' etc/worker.ini\n",
        "the worker should run 8 concurrent jobs on the queue named emails, with no prefetch setting at all "
        "(remove it). Retries: at most 5 attempts, with a new key backoff_s = 30 in [retry]. No other sections.",
        "train")
    return [server, worker]


SETTINGS = {"app": {"name": "shop", "timeout_s": 10, "legacy_mode": True},
            "features": {"new_checkout": False, "dark_mode": True}, "version": 3}
SETTINGS_FIXED = {"app": {"name": "shop", "timeout_s": 30},
                  "features": {"new_checkout": True, "dark_mode": True, "search_v2": True}, "version": 3}
JSON_CHECK = ("import json\nimport sys\n\nwith open('/work/settings.json', encoding='utf-8') as handle:\n"
              "    data = json.load(handle)\nwhat = sys.argv[1]\n"
              "print(json.dumps(sorted(data) if what == 'keys' else data.get(what), sort_keys=True))\n")


def json_env():
    def shown(data, what):
        return json.dumps(sorted(data) if what == "keys" else data.get(what), sort_keys=True)
    whats = ("keys", "app", "features", "version")
    tests = guarded([{"name": what, "cmd": f"python3 -I {{tests}}/settings.py {what}",
                      "stdout": shown(SETTINGS_FIXED, what)} for what in whats],
                    {what for what in whats if shown(SETTINGS, what) == shown(SETTINGS_FIXED, what)})
    reference = ("python3 - <<'EOF'\nimport json\nwith open('settings.json') as f:\n    data = json.load(f)\n"
                 "data['features']['new_checkout'] = True\ndata['features']['search_v2'] = True\n"
                 "data['app']['timeout_s'] = 30\ndel data['app']['legacy_mode']\n"
                 "with open('settings.json', 'w') as f:\n    json.dump(data, f, indent=2)\n    f.write('\\n')\nEOF\n")
    prompt = ("Update settings.json for the release: turn the new_checkout feature on, add a search_v2 feature "
              "that is on, raise app.timeout_s to 30 and remove app.legacy_mode. Everything else stays the same "
              "and the file must remain valid JSON.\n")
    return workspace_spec(suite=SUITE, name="config_json_release", prompt=prompt,
                          workspace={"settings.json": json.dumps(SETTINGS, indent=2) + "\n"}, reference=reference,
                          files={"settings.py": JSON_CHECK}, tests=tests, runtime="python", difficulty=1,
                          split="train", tags=["config", "json"])


ENV_EXAMPLE = "# Copy to .env and fill in.\nDATABASE_URL=\nSECRET_KEY=\nDEBUG=true\nPORT=8000\n"
ENV_VALUES = {"DATABASE_URL": "postgres://app@db:5432/app", "SECRET_KEY": "s3cr3t-k3y", "DEBUG": "false",
              "PORT": "9000"}
ENV_CHECK = ("import json\nimport sys\n\ndef parse(path):\n    values = {}\n"
             "    with open(path, encoding='utf-8') as handle:\n        for line in handle:\n"
             "            line = line.strip()\n            if line and not line.startswith('#'):\n"
             "                key, _, value = line.partition('=')\n                values[key] = value\n"
             "    return values\n\nprint(json.dumps(parse(sys.argv[1]), sort_keys=True))\n")


def _dotenv(text: str | None) -> dict[str, str] | None:
    """What ``ENV_CHECK`` parses from a file's text (None: no such file, the check fails)."""
    if text is None:
        return None
    pairs = [line.strip().partition("=") for line in text.splitlines()]
    return {key: value for key, _, value in pairs if key and not key.startswith("#")}


def env_file_env():
    example = {"DATABASE_URL": "", "SECRET_KEY": "", "DEBUG": "true", "PORT": "8000"}
    files = {"env_values": (".env", ENV_VALUES), "example_unchanged": (".env.example", example)}
    workspace = {".env.example": ENV_EXAMPLE}
    tests = guarded([{"name": name, "cmd": f"python3 -I {{tests}}/dotenv.py /work/{path}",
                      "stdout": json.dumps(want, sort_keys=True)} for name, (path, want) in files.items()],
                    {name for name, (path, want) in files.items() if _dotenv(workspace.get(path)) == want})
    prompt = ("Create the .env file this service reads, from the template .env.example (which must stay as it "
              "is): DATABASE_URL=postgres://app@db:5432/app, SECRET_KEY=s3cr3t-k3y, DEBUG=false and PORT=9000, "
              "one KEY=value per line, no quotes, no other keys.\n")
    reference = heredoc(".env", "".join(f"{k}={v}\n" for k, v in ENV_VALUES.items()))
    return workspace_spec(suite=SUITE, name="config_env_file", prompt=prompt, workspace=workspace,
                          reference=reference, files={"dotenv.py": ENV_CHECK}, tests=tests, runtime="bash",
                          difficulty=1, split="eval", tags=["config", "dotenv"])


MAKEFILE = """BUILD := build

all: $(BUILD)/index.html

$(BUILD)/index.html: src/header.html src/content.md tools/render.py
\tmkdir -p $(BUILD)
\tpython3 tools/render.py src/header.html src/contents.md > $@

clean:
\trm -rf $(BUILD)

.PHONY: all clean
"""
RENDER_BUGGY = '''"""Render a tiny Markdown subset after an HTML header: `python3 tools/render.py HEADER CONTENT`.

`# text` lines become `<h1>text</h1>`, other non-empty lines `<p>text</p>`; blank lines are dropped.
"""
import sys


def render(line):
    if line.startswith("#"):
        return "<h1>" + line[1:] + "</h1>"
    return "<p>" + line + "</p>"


def main(header, content):
    with open(header) as handle:
        print(handle.read().rstrip("\\n"))
    with open(content) as handle:
        for line in handle:
            line = line.rstrip("\\n")
            if line.strip():
                print(render(line))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''
HEADER_HTML = "<!doctype html>\n<title>Release notes</title>\n"
CONTENT_MD = "# Release 2.1\n\nFaster start-up.\n\n# Fixes\nNo more crash on empty input.\n"
HIDDEN_MD = "# A\nb\n\n#C\n"


def rendered(header: str, content: str, source: str | None = None) -> str:
    """What tools/render.py prints: the fixed renderer's output, or that of the renderer ``source`` (trusted)."""
    if source is not None:
        namespace: dict = {"__name__": "render"}
        exec(compile(source, "<render.py>", "exec"), namespace)  # noqa: S102 - our own generator code
        render = namespace["render"]
    else:
        def render(line):
            return f"<h1>{line[1:].strip()}</h1>" if line.startswith("#") else f"<p>{line}</p>"
    return "\n".join([header.rstrip("\n"), *(render(line) for line in content.splitlines() if line.strip())])


def build_env():
    tests = [{"name": "make_output", "cmd": ["bash", "-c", "make -s >/dev/null 2>&1 || echo 'make failed'; "
                                                           "cat build/index.html"],
              "stdout": rendered(HEADER_HTML, CONTENT_MD)},
             {"name": "clean_rebuild", "cmd": ["bash", "-c", "make -s clean >/dev/null 2>&1 && make -s >/dev/null "
                                                             "2>&1 && test -s build/index.html && echo rebuilt"],
              "stdout": "rebuilt"},
             {"name": "renderer", "cmd": "python3 tools/render.py {tests}/header.html {tests}/other.md",
              "stdout": rendered(HEADER_HTML, HIDDEN_MD)}]
    prompt = ("`make` fails in this repository. Fix the build so that `make` writes build/index.html (the header "
              "followed by the rendered content), and make tools/render.py follow its own docstring: a heading "
              "line `# text` or `#text` becomes `<h1>text</h1>` with the surrounding spaces removed. Do not "
              "change the files under src/.\n")
    workspace = {"Makefile": MAKEFILE, "tools/render.py": RENDER_BUGGY, "src/header.html": HEADER_HTML,
                 "src/content.md": CONTENT_MD}
    recipe = next(line for line in MAKEFILE.splitlines() if "render.py" in line and line.startswith("\t"))
    make_works = all(word in workspace for word in recipe.split() if word.startswith(("src/", "tools/")))
    outputs = {"make_output": (make_works, CONTENT_MD), "clean_rebuild": (make_works, None),
               "renderer": (True, HIDDEN_MD)}  # test: (runs the renderer at all, on what)
    tests = guarded(tests, {name for name, (runs, md) in outputs.items() if runs and (
        md is None or rendered(HEADER_HTML, md, RENDER_BUGGY) == rendered(HEADER_HTML, md))})
    reference = ("sed -i 's|src/contents.md|src/content.md|' Makefile\n"
                 "sed -i 's|return \"<h1>\" + line\\[1:\\] + \"</h1>\"|return \"<h1>\" + line[1:].strip() + "
                 "\"</h1>\"|' tools/render.py\n")
    return workspace_spec(suite=SUITE, name="build_make_pass", prompt=prompt, workspace=workspace,
                          reference=reference, files={"header.html": HEADER_HTML, "other.md": HIDDEN_MD},
                          tests=tests, runtime="bash", difficulty=2, split="train", tags=["build", "make"])


COUNT_BUGGY = """#!/usr/bin/env bash
# Usage: count_words.sh DIR
# Prints "<file name>: <number of words>" for every .txt file in DIR, sorted by name, then "total: <sum>".
dir=$1
total=0
for f in $(ls $dir/*.txt); do
    n=$(wc -l < $f)
    echo "$(basename $f): $n"
    total=$((total + n))
done
echo "total: $total"
"""
COUNT_FIXED = """#!/usr/bin/env bash
# Usage: count_words.sh DIR
# Prints "<file name>: <number of words>" for every .txt file in DIR, sorted by name, then "total: <sum>".
dir=$1
total=0
for f in "$dir"/*.txt; do
    [ -e "$f" ] || continue
    n=$(wc -w < "$f")
    echo "$(basename "$f"): $n"
    total=$((total + n))
done
echo "total: $total"
"""
FIXTURES = {
    "spaces": {"alpha notes.txt": "one two three\nfour\n", "beta.txt": "five six\n", "skip.md": "not counted here\n"},
    "single": {"only.txt": "a b c d e f g\n\nh i\n"},
    "empty_dir": {},
}


def bash_output(script: str, files: dict[str, str]) -> str:
    """What ``script`` (our own trusted code) prints, run by bash on the host on a directory holding ``files``."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        done = subprocess.run(["bash", "-c", script, "count_words.sh", tmp], capture_output=True, text=True,
                              timeout=10, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    return done.stdout.strip().replace(tmp + "/", "")


def count_env():
    tests, guards = [], set()
    for name, files in FIXTURES.items():
        writes = "".join(f"printf '%b' {json.dumps(text)} > \"$d\"/{json.dumps(fname)}\n"
                         for fname, text in files.items())
        script = f"d=$(mktemp -d)\n{writes}bash /work/scripts/count_words.sh \"$d\"\n"
        counts = {f: len(t.split()) for f, t in sorted(files.items()) if f.endswith(".txt")}
        expected = "".join(f"{f}: {n}\n" for f, n in counts.items()) + f"total: {sum(counts.values())}"
        tests.append({"name": name, "cmd": ["bash", "-c", script], "stdout": expected})
        if bash_output(COUNT_BUGGY, files) == expected:
            guards.add(name)
    tests = guarded(tests, guards)
    prompt = ("scripts/count_words.sh DIR should print `<file name>: <number of words>` for every .txt file in DIR "
              "(sorted by name), then `total: <sum>`. It counts lines instead of words and breaks on file names "
              "with spaces. Fix it; it must also work for a directory with no .txt files (just `total: 0`).\n")
    return workspace_spec(suite=SUITE, name="fix_shell_script", prompt=prompt,
                          workspace={"scripts/count_words.sh": COUNT_BUGGY}, reference=heredoc(
                              "scripts/count_words.sh", COUNT_FIXED), files={}, tests=tests, runtime="bash",
                          difficulty=2, split="train", tags=["bugfix", "bash"])


def specs():
    return [*config_envs(), json_env(), env_file_env(), build_env(), count_env()]
