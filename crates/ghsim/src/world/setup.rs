//! Setting the world up: enterprises, organizations, repositories, runner groups, PATs, Apps and
//! installations.

use std::collections::BTreeSet;

use jiff::Timestamp;
use jsonwebtoken::DecodingKey;

use super::{
    App, Enterprise, Group, GroupOwner, Installation, Org, Repo, SimError, Visibility, World,
};

impl World {
    /// Adds an enterprise (idempotent) with its default runner group.
    pub fn add_enterprise(&mut self, slug: &str) -> u64 {
        if let Some(e) = self.enterprises.get(slug) {
            return e.id;
        }
        let id = self.id();
        self.enterprises.insert(
            slug.to_owned(),
            Enterprise {
                id,
                slug: slug.to_owned(),
            },
        );
        self.groups.push(Group {
            id: 1,
            owner: GroupOwner::Enterprise(slug.to_owned()),
            name: "Default".into(),
            visibility: Visibility::All,
            selected: BTreeSet::new(),
            default: true,
            allows_public_repositories: true,
        });
        id
    }

    /// Adds an organization (idempotent), optionally in an enterprise, with its default group.
    pub fn add_org(&mut self, login: &str, enterprise: Option<&str>) -> u64 {
        if let Some(enterprise) = enterprise {
            self.add_enterprise(enterprise);
        }
        if let Some(org) = self.orgs.get_mut(login) {
            if enterprise.is_some() {
                org.enterprise = enterprise.map(str::to_owned);
            }
            return org.id;
        }
        let id = self.id();
        self.orgs.insert(
            login.to_owned(),
            Org {
                id,
                login: login.to_owned(),
                enterprise: enterprise.map(str::to_owned),
            },
        );
        self.groups.push(Group {
            id: 1,
            owner: GroupOwner::Org(login.to_owned()),
            name: "Default".into(),
            visibility: Visibility::All,
            selected: BTreeSet::new(),
            default: true,
            allows_public_repositories: true,
        });
        id
    }

    /// Adds a repository (idempotent). The owner is a user unless an organization of that
    /// login exists.
    pub fn add_repo(&mut self, owner: &str, name: &str, private: bool) -> u64 {
        if let Some(repo) = self.repo_by_name(owner, name) {
            return repo.id;
        }
        let id = self.id();
        self.repos.insert(
            id,
            Repo {
                id,
                owner: owner.to_owned(),
                name: name.to_owned(),
                private,
            },
        );
        id
    }

    /// Adds a personal access token with a label for accounting.
    pub fn add_pat(&mut self, token: &str, label: &str) {
        self.pats.insert(token.to_owned(), label.to_owned());
    }

    /// Adds a runner group; `selected` names repositories (`owner/repo`, org groups) or
    /// organizations (enterprise groups).
    pub fn add_group(
        &mut self,
        owner: GroupOwner,
        name: &str,
        visibility: Visibility,
        selected: &[String],
    ) -> Result<u64, SimError> {
        let selected = selected
            .iter()
            .map(|s| match &owner {
                GroupOwner::Org(_) => s
                    .split_once('/')
                    .and_then(|(o, r)| self.repo_by_name(o, r))
                    .map(|r| r.id),
                GroupOwner::Enterprise(_) => self.orgs.get(s).map(|o| o.id),
            })
            .collect::<Option<BTreeSet<u64>>>()
            .ok_or_else(|| {
                SimError::Unprocessable("unknown selected repository or organization".into())
            })?;
        match &owner {
            GroupOwner::Org(org) if !self.orgs.contains_key(org) => return Err(SimError::NotFound),
            GroupOwner::Enterprise(e) if !self.enterprises.contains_key(e) => {
                return Err(SimError::NotFound);
            }
            _ => {}
        }
        if self
            .groups
            .iter()
            .any(|g| g.owner == owner && g.name == name)
        {
            return Err(SimError::Conflict(format!(
                "runner group {name} already exists"
            )));
        }
        let id = self.id() + 1; // never 1: that is the default group
        self.groups.push(Group {
            id,
            owner,
            name: name.to_owned(),
            visibility,
            selected,
            default: false,
            allows_public_repositories: false,
        });
        Ok(id)
    }

    /// Adds an App with its public key (PEM).
    pub fn add_app(
        &mut self,
        id: Option<u64>,
        slug: &str,
        public_key_pem: &str,
    ) -> Result<&App, SimError> {
        let key = DecodingKey::from_rsa_pem(public_key_pem.as_bytes())
            .map_err(|e| SimError::Unprocessable(format!("invalid public key: {e}")))?;
        let id = id.unwrap_or_else(|| self.id());
        let client_id = format!(
            "Iv23li{}",
            self.random(b"abcdefghijklmnopqrstuvwxyz0123456789", 14)
        );
        self.apps.insert(
            id,
            App {
                id,
                client_id,
                slug: slug.to_owned(),
                key,
            },
        );
        Ok(&self.apps[&id])
    }

    /// Installs an App on an account.
    pub fn add_installation(
        &mut self,
        app_id: u64,
        account: &str,
        now: Timestamp,
    ) -> Result<u64, SimError> {
        if !self.apps.contains_key(&app_id) {
            return Err(SimError::NotFound);
        }
        let id = self.id();
        self.installations.insert(
            id,
            Installation {
                id,
                app_id,
                account: account.to_owned(),
                created_at: now,
            },
        );
        Ok(id)
    }
}
