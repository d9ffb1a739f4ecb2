//! Read-only questions about the world: scopes, credentials, runners and groups by name or id.

use hangar_github::Scope;
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::Value;

use super::{Identity, Repo, SimError, World};

impl World {
    /// A repository by owner and name.
    pub fn repo_by_name(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .values()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    /// Fails with 404 unless the scope exists.
    pub fn check_scope(&self, scope: &Scope) -> Result<(), SimError> {
        let exists = match scope {
            Scope::Repository { owner, repo } => self.repo_by_name(owner, repo).is_some(),
            Scope::Organization(org) => self.orgs.contains_key(org),
            Scope::Enterprise(slug) => self.enterprises.contains_key(slug),
        };
        exists.then_some(()).ok_or(SimError::NotFound)
    }

    /// The identity behind a bearer token (PAT or installation token), or `None`.
    pub fn identify_token(&self, token: &str, now: Timestamp) -> Result<Identity, SimError> {
        if let Some(label) = self.pats.get(token) {
            return Ok(Identity::Pat(label.clone()));
        }
        if let Some(record) = self.installation_tokens.get(token) {
            if record.expires_at <= now {
                return Err(SimError::Unauthorized("Bad credentials".into()));
            }
            let account = self
                .installations
                .get(&record.installation_id)
                .map(|i| i.account.clone())
                .unwrap_or_default();
            return Ok(Identity::Installation {
                id: record.installation_id,
                account,
            });
        }
        Err(SimError::Unauthorized("Bad credentials".into()))
    }

    /// Verifies an App JWT (RS256, `iss` = App id or client id, `exp` in the future and at
    /// most 10 minutes ahead, `iat` not in the future beyond a minute of skew).
    pub fn identify_jwt(&self, jwt: &str, now: Timestamp) -> Result<u64, SimError> {
        #[derive(Deserialize)]
        struct Claims {
            iss: Value,
            iat: i64,
            exp: i64,
        }
        let bad = |why: &str| SimError::Unauthorized(why.to_owned());
        let claims: Claims = jsonwebtoken::dangerous::insecure_decode(jwt)
            .map_err(|_| bad("A JSON web token could not be decoded"))?
            .claims;
        let iss = match &claims.iss {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return Err(bad("'Issuer' claim ('iss') must be an Integer or a String")),
        };
        let app = self
            .apps
            .values()
            .find(|a| a.id.to_string() == iss || a.client_id == iss)
            .ok_or_else(|| bad("Integration not found"))?;
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        // Time claims are checked below against the simulator's clock, not the system's.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        jsonwebtoken::decode::<Value>(jwt, &app.key, &validation)
            .map_err(|_| bad("A JSON web token could not be decoded"))?;
        let now_s = now.as_second();
        if claims.exp <= now_s {
            return Err(bad(
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
            ));
        }
        if claims.exp > now_s + 600 + 30 {
            return Err(bad(
                "'Expiration time' claim ('exp') is too far in the future",
            ));
        }
        if claims.iat > now_s + 60 {
            return Err(bad(
                "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
            ));
        }
        Ok(app.id)
    }

    /// Whether `identity` may act on `scope`: PATs everywhere, installation tokens on their
    /// own account only and never at enterprise level (GitHub Apps cannot manage enterprise
    /// runners), App JWTs nowhere.
    pub fn authorize(&self, identity: &Identity, scope: &Scope) -> Result<(), SimError> {
        match identity {
            Identity::Pat(_) => Ok(()),
            Identity::Installation { account, .. } => {
                let owner = match scope {
                    Scope::Repository { owner, .. } => owner,
                    Scope::Organization(org) => org,
                    Scope::Enterprise(_) => {
                        return Err(SimError::Forbidden(
                            "Resource not accessible by integration".into(),
                        ));
                    }
                };
                if owner.eq_ignore_ascii_case(account) {
                    Ok(())
                } else {
                    Err(SimError::Forbidden(
                        "Resource not accessible by integration".into(),
                    ))
                }
            }
            Identity::App(_) => Err(SimError::Unauthorized(
                "A JSON web token cannot be used to access this resource".into(),
            )),
        }
    }
}
