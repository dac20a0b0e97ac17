"""A git repository as workspace text: the history as a ``git fast-import`` stream, and the ``setup`` that builds it.

An env's workspace is text and git's objects are binary, so a generator ships the history as a fast-import stream
at ``STREAM`` (inside ``.git/``, so ``git status`` stays clean, and an agent that deletes the repository deletes a task
file) beside the working tree of the last commit, and the env's ``setup`` (``SETUP``) imports it and points the index
at HEAD. Authors and dates are written into the stream (``AUTHORS``, from ``EPOCH``), so every commit id is the same
on every machine and every run, and nothing needs the sandbox's HOME or the system's git config. Commits only add or
change files; a commit may carry a lightweight tag.

Example:
    >>> commits = [Commit("Add a", {"a.py": "x = 1\\n"}, tag="v0.1.0"), Commit("Change a", {"a.py": "x = 2\\n"})]
    >>> text = stream(commits)
    >>> text.splitlines()[:4]
    ['commit refs/heads/main', 'mark :1', 'author Ana Ortiz <ana@example.com> 1700000000 +0000', \
'committer Ana Ortiz <ana@example.com> 1700000000 +0000']
    >>> "reset refs/tags/v0.1.0\\nfrom :1\\n" in text, "from :1\\nM 644 inline a.py\\ndata 6\\nx = 2\\n" in text
    (True, True)
    >>> head_tree(commits)
    {'a.py': 'x = 2\\n'}
"""

from __future__ import annotations

from dataclasses import dataclass

STREAM = ".git/history.fi"
AUTHORS = (("Ana Ortiz", "ana@example.com"), ("Ben Okafor", "ben@example.com"), ("Chen Wei", "chen@example.com"))
EPOCH = 1700000000  # the first commit's time; the next ones follow hours apart
# Import the stream into the (pre-created) .git, point the index at HEAD (the working tree already is HEAD's), and
# give the repository an identity, so an agent's own ``git commit`` works without a global config.
SETUP = (f"export GIT_CONFIG_NOSYSTEM=1\ngit init -q -b main && git fast-import --quiet < {STREAM} && git reset -q "
         "&& git config user.name Developer && git config user.email developer@example.com\n")


@dataclass(frozen=True)
class Commit:
    message: str
    files: dict[str, str]  # the files it adds or changes: path -> whole content
    tag: str = ""  # a lightweight tag on it


def _data(text: str) -> str:
    return f"data {len(text.encode('utf-8'))}\n{text}\n"


def stream(commits: list[Commit]) -> str:
    """The fast-import stream of ``commits`` on ``main``, in order, with their tags."""
    out = []
    for i, commit in enumerate(commits):
        name, email = AUTHORS[i % len(AUTHORS)]
        when = f"{EPOCH + i * 9000 + (i * 2749) % 3600} +0000"
        out.append(f"commit refs/heads/main\nmark :{i + 1}\nauthor {name} <{email}> {when}\n"
                   f"committer {name} <{email}> {when}\n{_data(commit.message)}")
        out.append(f"from :{i}\n" if i else "")
        out += [f"M 644 inline {path}\n{_data(text)}" for path, text in sorted(commit.files.items())]
        out.append("\n")
        if commit.tag:
            out.append(f"reset refs/tags/{commit.tag}\nfrom :{i + 1}\n\n")
    return "".join(out)


def head_tree(commits: list[Commit]) -> dict[str, str]:
    """The files of the last commit (the working tree a clean checkout of HEAD has), by path."""
    tree: dict[str, str] = {}
    for commit in commits:
        tree.update(commit.files)
    return dict(sorted(tree.items()))
