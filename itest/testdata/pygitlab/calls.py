"""python-gitlab against a running registryd (run by itest/pygitlab_test.go).

Reads its input as JSON from the environment variable PYGITLAB_INPUT
(url, tokens, ids), makes the calls a python-gitlab user makes, and prints
what it got as one JSON object; the Go test asserts on it. Every warning
python-gitlab gives (a base URL differing from the server's, a list cut at
one page) is collected and printed too, so that the test can require none.
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

import gitlab  # noqa: E402  (after the warning hook, so import warnings count too)

cfg = json.loads(os.environ["PYGITLAB_INPUT"])
url = cfg["url"]
out = {"python_gitlab": gitlab.__version__}

# A small per_page, so that get_all and iterator walk several pages through
# the Link headers.
gl = gitlab.Gitlab(url, private_token=cfg["token"], per_page=5)
admin = gitlab.Gitlab(url, private_token=cfg["admin_token"])

gl.auth()
out["auth"] = {"username": gl.user.username, "id": gl.user.id, "web_url": gl.user.web_url}
out["version"] = list(gl.version())


def paths(objs):
    return [o.full_path for o in objs]


out["groups_all"] = paths(gl.groups.list(get_all=True))
it = gl.groups.list(iterator=True)
out["groups_iter"] = paths(it)
out["groups_iter_meta"] = {"total": it.total, "total_pages": it.total_pages, "per_page": it.per_page}
out["groups_page2"] = paths(gl.groups.list(page=2, per_page=5))
out["groups_available"] = paths(gl.groups.list(all_available=True, get_all=True))
out["groups_search"] = paths(gl.groups.list(search="g1", get_all=True))
out["groups_top"] = paths(gl.groups.list(top_level_only=True, get_all=True))
out["groups_min40"] = paths(gl.groups.list(min_access_level=40, get_all=True))
out["groups_owned"] = paths(gl.groups.list(owned=True, get_all=True))
out["admin_groups"] = paths(admin.groups.list(get_all=True))

out["projects_all"] = [p.path_with_namespace for p in gl.projects.list(get_all=True)]
out["projects_membership"] = [p.path_with_namespace for p in gl.projects.list(membership=True, get_all=True)]
out["projects_search"] = [p.path_with_namespace for p in gl.projects.list(search="tool", get_all=True)]


def members(objs):
    return [[m.username, m.access_level] for m in objs]


group = gl.groups.get(cfg["group_id"])
out["group_members"] = members(group.members.list(get_all=True))
out["group_members_all"] = members(group.members_all.list(get_all=True))
sub = gl.groups.get(cfg["subgroup_id"], lazy=True)
out["subgroup_members"] = members(sub.members.list(get_all=True))
out["subgroup_members_all"] = members(sub.members_all.list(get_all=True))
out["subgroup_member_all_one"] = members([sub.members_all.get(cfg["user_id"])])
project = gl.projects.get(cfg["project_id"])
out["project_members"] = members(project.members.list(get_all=True))
out["project_members_all"] = members(project.members_all.list(get_all=True))

out["tokens"] = [[t.name, t.active, t.revoked] for t in gl.personal_access_tokens.list(get_all=True)]
out["admin_tokens_of_user"] = [t.name for t in admin.personal_access_tokens.list(user_id=cfg["user_id"], get_all=True)]


def events(objs):
    return [[e.action_name, e.project_id, e.author_username] for e in objs]


out["events"] = events(gl.events.list(get_all=True))
out["user_events"] = events(gl.users.get(cfg["other_user_id"]).events.list(get_all=True))
out["project_events"] = events(project.events.list(get_all=True))
out["project_events_joined"] = events(project.events.list(action="joined", get_all=True))

bad = gitlab.Gitlab(url, private_token="rdpat-not-a-token")
try:
    bad.groups.list(get_all=True)
    out["bad_token"] = "no error"
except gitlab.exceptions.GitlabAuthenticationError as e:
    out["bad_token"] = f"{type(e).__name__} {e.response_code}"
except gitlab.exceptions.GitlabError as e:
    out["bad_token"] = f"{type(e).__name__} {e.response_code}"

out["warnings"] = caught
json.dump(out, sys.stdout)
