"""python-gitlab deletes a group, a project and users of a running registryd
(run by itest/pygitlab_test.go after calls.py).

Input as calls.py's (PYGITLAB_INPUT): url, tokens and the ids of what to
delete. Prints one JSON object of what each call answered and what the API
shows afterwards; the Go test asserts on it and checks the rest of the
effects itself.
"""

import json
import os
import sys
import warnings

caught = []


def _collect(message, category, filename, lineno, file=None, line=None):
    caught.append(f"{category.__name__}: {message}")


warnings.showwarning = _collect
warnings.simplefilter("always")

import gitlab  # noqa: E402

cfg = json.loads(os.environ["PYGITLAB_INPUT"])
url = cfg["url"]
out = {}
admin = gitlab.Gitlab(url, private_token=cfg["admin_token"])
alice = gitlab.Gitlab(url, private_token=cfg["token"])


def attempt(fn):
    """What a call answered: "ok", or the error class and status."""
    try:
        fn()
        return "ok"
    except gitlab.exceptions.GitlabError as e:
        return f"{type(e).__name__} {e.response_code}"


def group_get(gid):
    return attempt(lambda: admin.groups.get(gid))


def project_get(pid):
    return attempt(lambda: admin.projects.get(pid))


# A project: its maintainer may not delete it (owner only), root may.
out["project_delete_by_maintainer"] = attempt(lambda: alice.projects.get(cfg["scratch_project_id"]).delete())
out["project_delete"] = attempt(lambda: admin.projects.get(cfg["scratch_project_id"]).delete())
out["project_after"] = project_get(cfg["scratch_project_id"])

# A group with a subgroup, a project and a registry: all gone at once.
out["group_delete_by_outsider"] = attempt(lambda: alice.groups.delete(cfg["doomed_group_id"]))
out["group_delete"] = attempt(lambda: admin.groups.get(cfg["doomed_group_id"]).delete())
out["group_after"] = group_get(cfg["doomed_group_id"])
out["subgroup_after"] = group_get(cfg["doomed_subgroup_id"])
out["group_project_after"] = project_get(cfg["doomed_project_id"])
out["group_paths_after"] = [g.full_path for g in admin.groups.list(search="doomed", get_all=True)]

# A user: only admins may delete; the user and their token are gone.
out["user_delete_by_user"] = attempt(lambda: alice.users.delete(cfg["carol_id"]))
out["user_delete"] = attempt(lambda: admin.users.get(cfg["carol_id"]).delete())
out["user_after"] = attempt(lambda: admin.users.get(cfg["carol_id"]))
out["user_token_after"] = attempt(lambda: gitlab.Gitlab(url, private_token=cfg["carol_token"]).auth())
out["users_named_carol"] = [u.username for u in admin.users.list(username="carol")]

# The only owner of a group: refused, unless hard_delete, which takes the group too.
out["sole_owner_delete"] = attempt(lambda: admin.users.delete(cfg["dave_id"]))
out["sole_owner_group_before"] = group_get(cfg["dave_group_id"])
out["sole_owner_hard_delete"] = attempt(lambda: admin.users.delete(cfg["dave_id"], hard_delete=True))
out["sole_owner_after"] = attempt(lambda: admin.users.get(cfg["dave_id"]))
out["sole_owner_group_after"] = group_get(cfg["dave_group_id"])

out["warnings"] = caught
json.dump(out, sys.stdout)
