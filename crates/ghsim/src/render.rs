//! GitHub's JSON shapes, rendered from the world.
//!
//! Every object carries the fields the OpenAPI schemas mark required (checked by the
//! conformance tests against `@octokit/openapi`), with URLs under ghsim's public URL, which
//! serves both as API host and as web host.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::world::{
    Emitted, Group, GroupOwner, Installation, Job, JobStatus, Payload, Repo, Run, Runner,
    Visibility, World,
};

fn base(world: &World) -> String {
    world
        .config
        .public_url
        .as_str()
        .trim_end_matches('/')
        .to_owned()
}

/// GitHub's timestamp format: seconds, `Z`.
pub fn ts(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A `simple-user` for a login; organizations get `type: Organization`.
pub fn user(world: &World, login: &str) -> Value {
    let b = base(world);
    let (id, kind) = match world.orgs.get(login) {
        Some(org) => (org.id, "Organization"),
        None => (user_id(login), "User"),
    };
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_{id}"),
        "avatar_url": format!("{b}/avatars/{login}"),
        "gravatar_id": "",
        "url": format!("{b}/users/{login}"),
        "html_url": format!("{b}/{login}"),
        "followers_url": format!("{b}/users/{login}/followers"),
        "following_url": format!("{b}/users/{login}/following{{/other_user}}"),
        "gists_url": format!("{b}/users/{login}/gists{{/gist_id}}"),
        "starred_url": format!("{b}/users/{login}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{b}/users/{login}/subscriptions"),
        "organizations_url": format!("{b}/users/{login}/orgs"),
        "repos_url": format!("{b}/users/{login}/repos"),
        "events_url": format!("{b}/users/{login}/events{{/privacy}}"),
        "received_events_url": format!("{b}/users/{login}/received_events"),
        "type": kind,
        "user_view_type": "public",
        "site_admin": false
    })
}

/// A stable pseudo id for a user login.
fn user_id(login: &str) -> u64 {
    login
        .bytes()
        .fold(5381u64, |h, c| h.wrapping_mul(33) ^ u64::from(c))
        % 90_000_000
        + 10_000_000
}

/// A `minimal-repository`.
pub fn repository(world: &World, repo: &Repo) -> Value {
    let b = base(world);
    let full = repo.full_name();
    let api = format!("{b}/repos/{full}");
    json!({
        "id": repo.id,
        "node_id": format!("R_{}", repo.id),
        "name": repo.name,
        "full_name": full,
        "owner": user(world, &repo.owner),
        "private": repo.private,
        "visibility": if repo.private { "private" } else { "public" },
        "html_url": format!("{b}/{full}"),
        "description": null,
        "fork": false,
        "url": api,
        "archive_url": format!("{api}/{{archive_format}}{{/ref}}"),
        "assignees_url": format!("{api}/assignees{{/user}}"),
        "blobs_url": format!("{api}/git/blobs{{/sha}}"),
        "branches_url": format!("{api}/branches{{/branch}}"),
        "collaborators_url": format!("{api}/collaborators{{/collaborator}}"),
        "comments_url": format!("{api}/comments{{/number}}"),
        "commits_url": format!("{api}/commits{{/sha}}"),
        "compare_url": format!("{api}/compare/{{base}}...{{head}}"),
        "contents_url": format!("{api}/contents/{{+path}}"),
        "contributors_url": format!("{api}/contributors"),
        "deployments_url": format!("{api}/deployments"),
        "downloads_url": format!("{api}/downloads"),
        "events_url": format!("{api}/events"),
        "forks_url": format!("{api}/forks"),
        "git_commits_url": format!("{api}/git/commits{{/sha}}"),
        "git_refs_url": format!("{api}/git/refs{{/sha}}"),
        "git_tags_url": format!("{api}/git/tags{{/sha}}"),
        "git_url": format!("git://{}/{full}.git", host(world)),
        "issue_comment_url": format!("{api}/issues/comments{{/number}}"),
        "issue_events_url": format!("{api}/issues/events{{/number}}"),
        "issues_url": format!("{api}/issues{{/number}}"),
        "keys_url": format!("{api}/keys{{/key_id}}"),
        "labels_url": format!("{api}/labels{{/name}}"),
        "languages_url": format!("{api}/languages"),
        "merges_url": format!("{api}/merges"),
        "milestones_url": format!("{api}/milestones{{/number}}"),
        "notifications_url": format!("{api}/notifications{{?since,all,participating}}"),
        "pulls_url": format!("{api}/pulls{{/number}}"),
        "releases_url": format!("{api}/releases{{/id}}"),
        "ssh_url": format!("git@{}:{full}.git", host(world)),
        "stargazers_url": format!("{api}/stargazers"),
        "statuses_url": format!("{api}/statuses/{{sha}}"),
        "subscribers_url": format!("{api}/subscribers"),
        "subscription_url": format!("{api}/subscription"),
        "tags_url": format!("{api}/tags"),
        "teams_url": format!("{api}/teams"),
        "trees_url": format!("{api}/git/trees{{/sha}}"),
        "clone_url": format!("{b}/{full}.git"),
        "hooks_url": format!("{api}/hooks"),
        "default_branch": "main"
    })
}

fn host(world: &World) -> String {
    world
        .config
        .public_url
        .host_str()
        .unwrap_or("localhost")
        .to_owned()
}

/// A `runner`.
pub fn runner(runner: &Runner) -> Value {
    let labels: Vec<Value> = runner
        .labels
        .iter()
        .map(|l| json!({"id": l.id, "name": l.name, "type": if l.read_only { "read-only" } else { "custom" }}))
        .collect();
    let mut value = json!({
        "id": runner.id,
        "name": runner.name,
        "os": runner.os,
        "status": if runner.online() { "online" } else { "offline" },
        "busy": runner.busy(),
        "ephemeral": runner.ephemeral,
        "labels": labels,
        "version": runner.version,
    });
    if let Some(group) = runner.group_id {
        value["runner_group_id"] = json!(group);
    }
    value
}

/// A `runner-groups-org` (or enterprise) object, as its owner lists it.
pub fn group(world: &World, group: &Group) -> Value {
    group_seen_by(world, group, &group.owner)
}

/// A runner group as `viewer` lists it: an enterprise group listed by one of the
/// organizations it is shared with is `inherited`, under that organization's URLs.
pub fn group_seen_by(world: &World, group: &Group, viewer: &GroupOwner) -> Value {
    let b = base(world);
    let inherited = *viewer != group.owner;
    let prefix = match viewer {
        GroupOwner::Org(org) => format!("{b}/orgs/{org}/actions/runner-groups/{}", group.id),
        GroupOwner::Enterprise(e) => {
            format!("{b}/enterprises/{e}/actions/runner-groups/{}", group.id)
        }
    };
    let visibility = match group.visibility {
        Visibility::All => "all",
        Visibility::Selected => "selected",
        Visibility::Private => "private",
    };
    let mut value = json!({
        "id": group.id,
        "name": group.name,
        "visibility": visibility,
        "default": group.default,
        "runners_url": format!("{prefix}/runners"),
        "inherited": inherited,
        "allows_public_repositories": group.allows_public_repositories,
        "restricted_to_workflows": false,
        "selected_workflows": [],
        "workflow_restrictions_read_only": false,
    });
    if inherited {
        value["inherited_allows_public_repositories"] = json!(group.allows_public_repositories);
    } else if group.visibility == Visibility::Selected {
        let what = match group.owner {
            GroupOwner::Org(_) => "repositories",
            GroupOwner::Enterprise(_) => "organizations",
        };
        value[format!("selected_{what}_url")] = json!(format!("{prefix}/{what}"));
    }
    value
}

/// A `job`.
pub fn job(world: &World, job: &Job) -> Value {
    job_of(
        world,
        job,
        &world.runs[&job.run_id],
        &world.repos[&job.repo_id],
    )
}

/// A `job` of the given run and repository (copies taken when an event happened).
fn job_of(world: &World, job: &Job, run: &Run, repo: &Repo) -> Value {
    let b = base(world);
    let full = repo.full_name();
    let started = job.started_at.unwrap_or(job.created_at);
    let (group_id, group_name) = match (&job.runner_group, job.status) {
        (Some((id, name)), s) if s != JobStatus::Queued => (json!(id), json!(name)),
        _ => (Value::Null, Value::Null),
    };
    let runner_id = if job.status == JobStatus::Queued {
        None
    } else {
        job.runner_id
    };
    json!({
        "id": job.id,
        "run_id": job.run_id,
        "run_url": format!("{b}/repos/{full}/actions/runs/{}", job.run_id),
        "run_attempt": 1,
        "node_id": format!("CR_{}", job.id),
        "head_sha": run.head_sha,
        "url": format!("{b}/repos/{full}/actions/jobs/{}", job.id),
        "html_url": format!("{b}/{full}/actions/runs/{}/job/{}", job.run_id, job.id),
        "status": job.status.as_str(),
        "conclusion": job.conclusion,
        "created_at": ts(job.created_at),
        "started_at": ts(started),
        "completed_at": job.completed_at.map(ts),
        "name": job.name,
        "steps": [],
        "check_run_url": format!("{b}/repos/{full}/check-runs/{}", job.id),
        "labels": job.labels,
        "runner_id": runner_id,
        "runner_name": if runner_id.is_some() { json!(job.runner_name) } else { Value::Null },
        "runner_group_id": group_id,
        "runner_group_name": group_name,
        "workflow_name": run.workflow_name,
        "head_branch": run.head_branch,
    })
}

/// A `workflow-run`.
pub fn run(world: &World, run: &Run) -> Value {
    let b = base(world);
    let repo = &world.repos[&run.repo_id];
    let full = repo.full_name();
    let api = format!("{b}/repos/{full}/actions/runs/{}", run.id);
    let (status, conclusion) = world.run_state(run);
    let repository = repository(world, repo);
    json!({
        "id": run.id,
        "name": run.workflow_name,
        "node_id": format!("WFR_{}", run.id),
        "check_suite_id": run.id + 1,
        "check_suite_node_id": format!("CS_{}", run.id + 1),
        "head_branch": run.head_branch,
        "head_sha": run.head_sha,
        "path": ".github/workflows/ci.yml",
        "display_title": run.workflow_name,
        "run_number": run.run_number,
        "run_attempt": 1,
        "event": run.event,
        "status": status,
        "conclusion": conclusion,
        "workflow_id": run.workflow_id,
        "url": api,
        "html_url": format!("{b}/{full}/actions/runs/{}", run.id),
        "pull_requests": [],
        "created_at": ts(run.created_at),
        "updated_at": ts(run.updated_at),
        "run_started_at": ts(run.created_at),
        "actor": user(world, &repo.owner),
        "triggering_actor": user(world, &repo.owner),
        "jobs_url": format!("{api}/jobs"),
        "logs_url": format!("{api}/logs"),
        "check_suite_url": format!("{b}/repos/{full}/check-suites/{}", run.id + 1),
        "artifacts_url": format!("{api}/artifacts"),
        "cancel_url": format!("{api}/cancel"),
        "rerun_url": format!("{api}/rerun"),
        "previous_attempt_url": null,
        "workflow_url": format!("{b}/repos/{full}/actions/workflows/{}", run.workflow_id),
        "head_commit": {
            "id": run.head_sha,
            "tree_id": run.head_sha.chars().rev().collect::<String>(),
            "message": "Simulated commit",
            "timestamp": ts(run.created_at),
            "author": {"name": "ghsim", "email": "ghsim@example.invalid"},
            "committer": {"name": "ghsim", "email": "ghsim@example.invalid"}
        },
        "repository": repository.clone(),
        "head_repository": repository,
    })
}

/// An `installation`.
pub fn installation(world: &World, inst: &Installation) -> Value {
    let b = base(world);
    let app = &world.apps[&inst.app_id];
    let mut account = user(world, &inst.account);
    // The description's list-installations schema demands `allOf [simple-user, enterprise]`
    // for the account, so it also carries the enterprise fields.
    account["name"] = json!(inst.account);
    account["slug"] = json!(inst.account);
    account["created_at"] = json!(ts(inst.created_at));
    account["updated_at"] = json!(ts(inst.created_at));
    let target_type = account["type"].clone();
    json!({
        "id": inst.id,
        "account": account,
        "repository_selection": "all",
        "access_tokens_url": format!("{b}/app/installations/{}/access_tokens", inst.id),
        "repositories_url": format!("{b}/installation/repositories"),
        "html_url": format!("{b}/organizations/{}/settings/installations/{}", inst.account, inst.id),
        "app_id": app.id,
        "client_id": app.client_id,
        "app_slug": app.slug,
        "target_id": account["id"].clone(),
        "target_type": target_type,
        "permissions": {"administration": "write", "organization_self_hosted_runners": "write", "actions": "read", "metadata": "read"},
        "events": ["workflow_job"],
        "created_at": ts(inst.created_at),
        "updated_at": ts(inst.created_at),
        "single_file_name": null,
        "suspended_by": null,
        "suspended_at": null
    })
}

/// The `organization` object of webhook payloads.
fn organization(world: &World, login: &str) -> Option<Value> {
    let org = world.orgs.get(login)?;
    let b = base(world);
    Some(json!({
        "login": org.login,
        "id": org.id,
        "node_id": format!("O_{}", org.id),
        "url": format!("{b}/orgs/{}", org.login),
        "repos_url": format!("{b}/orgs/{}/repos", org.login),
        "events_url": format!("{b}/orgs/{}/events", org.login),
        "hooks_url": format!("{b}/orgs/{}/hooks", org.login),
        "issues_url": format!("{b}/orgs/{}/issues", org.login),
        "members_url": format!("{b}/orgs/{}/members{{/member}}", org.login),
        "public_members_url": format!("{b}/orgs/{}/public_members{{/member}}", org.login),
        "avatar_url": format!("{b}/avatars/{}", org.login),
        "description": null
    }))
}

fn enterprise(world: &World, owner: &str) -> Option<Value> {
    let slug = world.orgs.get(owner)?.enterprise.as_ref()?;
    let e = world.enterprises.get(slug)?;
    let b = base(world);
    Some(json!({
        "id": e.id,
        "slug": e.slug,
        "name": e.slug,
        "node_id": format!("E_{}", e.id),
        "avatar_url": format!("{b}/avatars/{}", e.slug),
        "html_url": format!("{b}/enterprises/{}", e.slug),
        "created_at": null,
        "updated_at": null,
        "description": null,
        "website_url": null
    }))
}

/// Wraps an event body with `repository`, `organization`, `enterprise` and `sender`, as
/// GitHub's repository and organization deliveries do.
pub fn envelope(world: &World, repo: &Repo, mut body: Value) -> Value {
    body["repository"] = repository(world, repo);
    if let Some(org) = organization(world, &repo.owner) {
        body["organization"] = org;
    }
    if let Some(e) = enterprise(world, &repo.owner) {
        body["enterprise"] = e;
    }
    body["sender"] = user(world, &repo.owner);
    body
}

/// A `workflow_job` webhook payload for a job at this moment.
pub fn workflow_job_event(world: &World, action: &str, job_id: u64) -> Value {
    let job = &world.jobs[&job_id];
    workflow_job_payload(
        world,
        action,
        job,
        &world.runs[&job.run_id],
        &world.repos[&job.repo_id],
    )
}

fn workflow_job_payload(world: &World, action: &str, job: &Job, run: &Run, repo: &Repo) -> Value {
    let job_value = job_of(world, job, run, repo);
    envelope(
        world,
        repo,
        json!({"action": action, "workflow_job": job_value}),
    )
}

/// The JSON payload of an emitted event. A `workflow_job` shows the job, run and repository
/// as they were when it happened; owners, organizations and URLs come from `world` (set-up
/// data no transition changes).
pub fn emitted(world: &World, event: &Emitted) -> Value {
    match &event.payload {
        Payload::WorkflowJob {
            action,
            job,
            run,
            repo,
        } => workflow_job_payload(world, action, job, run, repo),
        Payload::Rendered(value) => value.clone(),
    }
}

/// A `ping` payload for a new hook.
pub fn ping_event(
    world: &World,
    hook_id: u64,
    hook_url: &str,
    events: &[String],
    now: Timestamp,
) -> Value {
    let b = base(world);
    json!({
        "zen": "Design for failure.",
        "hook_id": hook_id,
        "hook": {
            "type": "Organization",
            "id": hook_id,
            "name": "web",
            "active": true,
            "events": events,
            "config": {"content_type": "json", "insecure_ssl": "0", "url": hook_url},
            "updated_at": ts(now),
            "created_at": ts(now),
            "url": format!("{b}/hooks/{hook_id}"),
            "ping_url": format!("{b}/hooks/{hook_id}/pings"),
            "deliveries_url": format!("{b}/hooks/{hook_id}/deliveries")
        },
        "sender": user(world, "ghsim")
    })
}

/// A `hook` (a repository's) or `org-hook` (an organization's), as the REST API shows it: the
/// secret masked, events as subscribed (all of them shown as `*`).
pub fn hook(world: &World, hook: &crate::webhooks::Hook) -> Value {
    let b = base(world);
    let (kind, url) = match (&hook.repository, &hook.owner) {
        (Some(repo), _) => ("Repository", format!("{b}/repos/{repo}/hooks/{}", hook.id)),
        (None, Some(org)) => ("Organization", format!("{b}/orgs/{org}/hooks/{}", hook.id)),
        (None, None) => ("Organization", format!("{b}/hooks/{}", hook.id)),
    };
    let events: Vec<&str> = if hook.events.is_empty() {
        vec!["*"]
    } else {
        hook.events.iter().map(String::as_str).collect()
    };
    let content_type = match hook.content_type {
        crate::webhooks::ContentType::Json => "json",
        crate::webhooks::ContentType::Form => "form",
    };
    let mut config = json!({"url": hook.url, "content_type": content_type, "insecure_ssl": "0"});
    if hook.secret.is_some() {
        config["secret"] = json!("********");
    }
    let created = hook.created_at.clone().unwrap_or_default();
    let mut value = json!({
        "type": kind,
        "id": hook.id,
        "name": "web",
        "active": hook.active,
        "events": events,
        "config": config,
        "updated_at": created,
        "created_at": created,
        "url": url,
        "ping_url": format!("{url}/pings"),
        "deliveries_url": format!("{url}/deliveries"),
    });
    if kind == "Repository" {
        value["test_url"] = json!(format!("{url}/test"));
        value["last_response"] = json!({"code": null, "status": "unused", "message": null});
    }
    value
}

/// A `push` payload.
pub fn push_event(world: &World, repo: &Repo, sha: &str, now: Timestamp) -> Value {
    let b = base(world);
    let full = repo.full_name();
    let commit = json!({
        "id": sha,
        "tree_id": sha.chars().rev().collect::<String>(),
        "distinct": true,
        "message": "Simulated push",
        "timestamp": ts(now),
        "url": format!("{b}/{full}/commit/{sha}"),
        "author": {"name": "ghsim", "email": "ghsim@example.invalid", "username": "ghsim"},
        "committer": {"name": "ghsim", "email": "ghsim@example.invalid", "username": "ghsim"},
        "added": [], "removed": [], "modified": ["README.md"]
    });
    envelope(
        world,
        repo,
        json!({
            "ref": "refs/heads/main",
            "before": "0000000000000000000000000000000000000000",
            "after": sha,
            "created": false,
            "deleted": false,
            "forced": false,
            "base_ref": null,
            "compare": format!("{b}/{full}/compare/{sha}"),
            "commits": [commit.clone()],
            "head_commit": commit,
            "pusher": {"name": repo.owner, "email": null}
        }),
    )
}

/// A `pull_request` payload.
pub fn pull_request_event(
    world: &World,
    repo: &Repo,
    action: &str,
    number: u64,
    sha: &str,
    now: Timestamp,
) -> Value {
    let b = base(world);
    let full = repo.full_name();
    let side = |name: &str| json!({"label": format!("{}:{name}", repo.owner), "ref": name, "sha": sha, "user": user(world, &repo.owner), "repo": repository(world, repo)});
    envelope(
        world,
        repo,
        json!({
            "action": action,
            "number": number,
            "pull_request": {
                "url": format!("{b}/repos/{full}/pulls/{number}"),
                "id": number + 500_000,
                "node_id": format!("PR_{number}"),
                "html_url": format!("{b}/{full}/pull/{number}"),
                "number": number,
                "state": if action == "closed" { "closed" } else { "open" },
                "locked": false,
                "title": "Simulated change",
                "user": user(world, &repo.owner),
                "body": null,
                "created_at": ts(now),
                "updated_at": ts(now),
                "closed_at": null,
                "merged_at": null,
                "draft": false,
                "merged": false,
                "head": side("feature"),
                "base": side("main")
            }
        }),
    )
}

/// A `check_run` payload for a job.
pub fn check_run_event(world: &World, action: &str, job_id: u64) -> Option<Value> {
    let job = world.jobs.get(&job_id)?;
    let repo = world.repos.get(&job.repo_id)?;
    let run = world.runs.get(&job.run_id)?;
    let b = base(world);
    let full = repo.full_name();
    Some(envelope(
        world,
        repo,
        json!({
            "action": action,
            "check_run": {
                "id": job.id,
                "name": job.name,
                "node_id": format!("CR_{}", job.id),
                "head_sha": run.head_sha,
                "external_id": "",
                "url": format!("{b}/repos/{full}/check-runs/{}", job.id),
                "html_url": format!("{b}/{full}/runs/{}", job.id),
                "details_url": format!("{b}/{full}/runs/{}", job.id),
                "status": job.status.as_str(),
                "conclusion": job.conclusion,
                "started_at": ts(job.started_at.unwrap_or(job.created_at)),
                "completed_at": job.completed_at.map(ts),
                "output": {"title": null, "summary": null, "text": null, "annotations_count": 0, "annotations_url": format!("{b}/repos/{full}/check-runs/{}/annotations", job.id)},
                "check_suite": {"id": run.id + 1, "head_branch": run.head_branch, "head_sha": run.head_sha},
                "app": null,
                "pull_requests": []
            }
        }),
    ))
}
