//! Templates: listed, and deleted when nothing stands on them.

use super::Berth;
use crate::error::Error;
use crate::ids::DomainId;
use crate::runtime::LABEL_TEMPLATE;
use crate::templates::{Template, TemplateState, TemplateView};

impl Berth {
    /// A domain's templates, newest first, each with the overlay volumes that stand on it.
    pub async fn templates(
        &self,
        owner: &str,
        domain_id: &DomainId,
    ) -> Result<Vec<TemplateView>, Error> {
        self.domain(owner, domain_id)?;
        let domain = domain_id.clone();
        Ok(self
            .store()
            .read(move |tx| {
                let mut views = Vec::new();
                for t in tx.templates(&domain)? {
                    let users = tx.layer_users(&volume_names(&t))?;
                    views.push(t.view(users));
                }
                Ok(views)
            })
            .await?)
    }

    /// Deletes template `id` and its volumes. One that volumes stand on (an instance made from
    /// it, or a snapshot of one), or that is being made, is kept: `TemplateInUse`.
    pub async fn delete_template(
        &self,
        owner: &str,
        domain_id: &DomainId,
        id: &str,
    ) -> Result<(), Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?;
        let (domain, read) = (domain_id.clone(), id.to_owned());
        let template = self
            .store()
            .read(move |tx| tx.template(&domain, &read))
            .await?
            .ok_or_else(|| Error::TemplateNotFound(id.to_owned()))?;
        if template.state == TemplateState::Building {
            return Err(Error::TemplateInUse {
                id: id.to_owned(),
                users: "the instance it is being made for".to_owned(),
            });
        }
        let names = volume_names(&template);
        let asked = names.clone();
        let users = self.store().read(move |tx| tx.layer_users(&asked)).await?;
        let mut holding = Vec::new();
        for user in users {
            let labels = reconciler
                .runtime()
                .volume_labels(&user)
                .await
                .map_err(|e| Error::Runtime(e.to_string()))?;
            if labels.is_some() {
                holding.push(user);
            } else {
                // Removed outside berth: it holds nothing.
                self.store()
                    .write(move |tx| tx.forget_layered(&user))
                    .await?;
            }
        }
        if !holding.is_empty() {
            return Err(Error::TemplateInUse {
                id: id.to_owned(),
                users: holding.join(", "),
            });
        }
        for name in &names {
            reconciler
                .runtime()
                .remove_volume(name, LABEL_TEMPLATE, &template.id)
                .await
                .map_err(|e| {
                    Error::Runtime(format!(
                        "the template's volume {name} could not be removed ({e}); delete it again"
                    ))
                })?;
        }
        let (domain, id) = (domain_id.clone(), id.to_owned());
        self.store()
            .write(move |tx| tx.delete_template(&domain, &id))
            .await?;
        tracing::info!(template = %template.id, "template deleted");
        Ok(())
    }
}

fn volume_names(t: &Template) -> Vec<String> {
    t.volumes.iter().map(|v| v.docker_name.clone()).collect()
}
