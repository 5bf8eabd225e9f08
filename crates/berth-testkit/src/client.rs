//! A blocking client for a test daemon's API.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::block_on;

/// A client for the daemon's API: typed calls through `berth-client` ([`Client::api`]), and raw
/// requests for the tests that send what no client would.
pub struct Client {
    base: String,
    key: Option<String>,
    http: reqwest::blocking::Client,
    api: berth_client::Client,
}

/// A response: its status and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// A typed call's result as an answer: a success as status 200 (what every route answers
    /// that a test reads this way) with the typed answer encoded back, the daemon's error as its
    /// status and whole body; a panic when the daemon could not be reached or understood.
    pub fn of<T: serde::Serialize>(result: Result<T, berth_client::ClientError>) -> Answer {
        match result {
            Ok(answer) => Answer {
                status: 200,
                body: json_of(&answer),
            },
            Err(berth_client::ClientError::Api(e)) => Answer {
                status: e.status,
                body: e.body,
            },
            Err(e) => panic!("the daemon did not answer: {e}"),
        }
    }

    /// Panics unless the status is `status`; returns the body.
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected answer: {}", self.body);
        self.body
    }

    /// Panics unless this is the error `tag` with `status`; returns the body.
    pub fn expect_error(self, status: u16, tag: &str) -> Value {
        assert_eq!(self.status, status, "unexpected answer: {}", self.body);
        assert_eq!(self.body["_tag"], tag, "unexpected error: {}", self.body);
        assert!(
            self.body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.body
        );
        self.body
    }
}

impl Client {
    pub fn new(base: &str, key: Option<&str>) -> Self {
        // Poll often on a daemon without the wait route: a test may wait for a brief state.
        let mut api = berth_client::Client::builder(base).poll_every(Duration::from_millis(50));
        if let Some(key) = key {
            api = api.key(key);
        }
        Self {
            base: base.to_owned(),
            key: key.map(str::to_owned),
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("an http client"),
            api: api.build().expect("a berth client"),
        }
    }

    /// The typed client, for [`block_on`].
    pub fn api(&self) -> &berth_client::Client {
        &self.api
    }

    /// Runs one typed call of berth-client to its end:
    /// `api.call(|c| c.fence(&domain))`.
    pub fn call<'a, T, F>(
        &'a self,
        call: impl FnOnce(&'a berth_client::Client) -> F,
    ) -> Result<T, berth_client::ClientError>
    where
        F: std::future::Future<Output = Result<T, berth_client::ClientError>>,
    {
        block_on(call(&self.api))
    }

    /// [`Client::call`] as an [`Answer`] (see [`Answer::of`]), for the tests that read an
    /// answer's fields by name.
    pub fn answer<'a, T, F>(&'a self, call: impl FnOnce(&'a berth_client::Client) -> F) -> Answer
    where
        T: serde::Serialize,
        F: std::future::Future<Output = Result<T, berth_client::ClientError>>,
    {
        Answer::of(self.call(call))
    }

    /// Sends `method path` with an optional raw body and extra headers.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let res = req.send().expect("the daemon answers");
        let status = res.status().as_u16();
        let text = res.text().expect("a body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer { status, body }
    }

    /// POSTs a streamed body.
    pub fn post_stream(&self, path: &str, body: impl std::io::Read + Send + 'static) -> Answer {
        let mut req = self.http.post(format!("{}{}", self.base, path));
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let res = req
            .body(reqwest::blocking::Body::new(body))
            .send()
            .expect("the daemon answers");
        let status = res.status().as_u16();
        let text = res.text().expect("a body");
        Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }

    /// Runs `argv` in an instance through the exec route with `stdin`.
    pub fn exec(
        &self,
        domain: &str,
        key: &str,
        argv: &[&str],
        user: Option<&str>,
        timeout_ms: u64,
        stdin: &[u8],
    ) -> Answer {
        let mut body = json!({"argv": argv, "user": user, "timeoutMs": timeout_ms})
            .to_string()
            .into_bytes();
        body.push(b'\n');
        body.extend_from_slice(stdin);
        self.raw(
            "POST",
            &format!("/v1/resource-domains/{domain}/instances/{key}/exec"),
            Some(body),
            &[],
        )
    }

    pub fn get(&self, path: &str) -> Answer {
        self.raw("GET", path, None, &[])
    }

    pub fn post(&self, path: &str, body: Value) -> Answer {
        self.raw("POST", path, Some(body.to_string().into_bytes()), &[])
    }

    pub fn post_empty(&self, path: &str) -> Answer {
        self.raw("POST", path, None, &[])
    }

    /// Creates a domain and returns its id.
    pub fn create_domain(&self, name: &str) -> String {
        block_on(self.api.create_domain(name))
            .unwrap_or_else(|e| panic!("creating domain {name:?}: {e}"))
            .resource_domain_id
            .to_string()
    }

    /// `up` through the typed client: the instance as stored, or a panic naming the error.
    pub fn up_ok(
        &self,
        domain: &str,
        key: &str,
        spec: &Value,
        cause: &str,
    ) -> berth_client::InstanceView {
        block_on(self.api.up(&domain_id(domain), key, spec, up_cause(cause)))
            .unwrap_or_else(|e| panic!("up of {key}: {e}"))
    }

    /// `get` an instance through the typed client.
    pub fn get_instance(&self, domain: &str, key: &str) -> berth_client::InstanceView {
        block_on(self.api.instance(&domain_id(domain), key))
            .unwrap_or_else(|e| panic!("get of {key}: {e}"))
    }

    /// `up` with a spec and cause as raw JSON, for the wire tests that check the answer's exact
    /// bytes against the contract (a typed answer encoded back would hide a key it does not
    /// name).
    pub fn up_raw(&self, domain: &str, key: &str, spec: &Value, cause: &str) -> Answer {
        self.post(
            &format!("/v1/resource-domains/{domain}/instances/{key}/up"),
            json!({"spec": spec, "cause": cause}),
        )
    }

    /// `up` with a spec and cause through the typed client, as an [`Answer`]: see
    /// [`Answer::of`].
    pub fn up(&self, domain: &str, key: &str, spec: &Value, cause: &str) -> Answer {
        Answer::of(block_on(self.api.up(
            &domain_id(domain),
            key,
            spec,
            up_cause(cause),
        )))
    }

    /// `get` an instance, decoded by the typed client (so a shape it cannot read fails here),
    /// as JSON for the tests that look into it.
    pub fn instance(&self, domain: &str, key: &str) -> Value {
        serde_json::to_value(self.get_instance(domain, key)).expect("an instance as JSON")
    }

    /// Waits until `done(instance)` or `timeout`, and returns the instance: told of each change
    /// by the domain's event stream, never asking on a timer. `done` runs outside any async
    /// context, so it may make blocking requests of its own.
    pub fn wait_for(
        &self,
        domain: &str,
        key: &str,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        // A new subscription starts with every instance, so the first look after subscribing
        // comes after it: no change falls between them.
        let mut events = Box::pin(self.api.events(&domain_id(domain), None));
        loop {
            let instance = self.instance(domain, key);
            if done(&instance) {
                return instance;
            }
            let woke = block_on(async {
                loop {
                    match tokio::time::timeout_at(deadline, events.next()).await {
                        Err(_) => return None,
                        Ok(Some(Ok(berth_client::DomainEvent::Instance { instance, .. })))
                            if instance.key != key => {}
                        Ok(Some(Ok(_))) => return Some(true),
                        Ok(Some(Err(e))) => panic!("the event stream failed: {e}"),
                        // The daemon ended the stream: subscribe again.
                        Ok(None) => return Some(false),
                    }
                }
            });
            match woke {
                None => panic!("{key} did not become {what} within {timeout:?}: {instance}"),
                Some(true) => {}
                Some(false) => events = Box::pin(self.api.events(&domain_id(domain), None)),
            }
        }
    }

    /// Asks the wait route once until the instance's state kind is one of `kinds` and berth has
    /// acted on the latest request made of it (`observedGeneration == generation`); panics at
    /// `timeout` (at most 300 s). What a test asserts after this is what berth settled on, not
    /// what it had not got to yet.
    pub fn settled(&self, domain: &str, key: &str, kinds: &[&str], timeout: Duration) -> Value {
        let waited = block_on(self.api.wait(&domain_id(domain), key, kinds, timeout))
            .unwrap_or_else(|e| panic!("waiting for {key} to settle as {kinds:?}: {e}"));
        assert!(
            !waited.timed_out,
            "{key} did not settle as {kinds:?} within {timeout:?} (generation {}, observed {}): {:?}",
            waited.generation, waited.observed_generation, waited.instance
        );
        assert_eq!(
            waited.observed_generation, waited.generation,
            "the wait route answered before berth acted on the latest request: {:?}",
            waited.instance
        );
        serde_json::to_value(waited.instance).expect("an instance as JSON")
    }

    /// Subscribes to the domain's event stream, for [`Watch::never`]: a bounded check that
    /// something does *not* happen.
    pub fn watch(&self, domain: &str) -> Watch {
        Watch {
            events: Box::pin(self.api.events(&domain_id(domain), None)),
        }
    }

    /// Waits through the client's one wait (the wait route, or polling on a daemon without
    /// it) until the instance's state kind is `kind`; panics at `timeout`.
    pub fn wait_state(&self, domain: &str, key: &str, kind: &str, timeout: Duration) -> Value {
        serde_json::to_value(self.wait_state_typed(domain, key, kind, timeout))
            .expect("an instance as JSON")
    }

    /// [`Client::wait_state`], typed.
    pub fn wait_state_typed(
        &self,
        domain: &str,
        key: &str,
        kind: &str,
        timeout: Duration,
    ) -> berth_client::InstanceView {
        let settled = block_on(self.api.wait_for_state(
            &domain_id(domain),
            key,
            &[kind],
            timeout,
            |v| v.engine.is_none(),
        ))
        .unwrap_or_else(|e| panic!("waiting for {key} to be {kind}: {e}"));
        assert!(
            !settled.timed_out,
            "{key} did not become {kind} within {timeout:?}: {:?}",
            settled.instance
        );
        settled.instance
    }
}

/// A subscription to a domain's event stream, opened by [`Client::watch`].
pub struct Watch {
    events: std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<berth_client::DomainEvent, berth_client::ClientError>,
                > + Send,
        >,
    >,
}

impl Watch {
    /// Reads the domain's events until an instance event shows `wanted` (the instance as JSON),
    /// and answers that instance; panics naming `what` when none has within `within`.
    pub fn until(
        &mut self,
        within: Duration,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        block_on(async {
            loop {
                match tokio::time::timeout_at(deadline, self.events.next()).await {
                    Err(_) => panic!("no instance event showed that {what} within {within:?}"),
                    Ok(Some(Ok(berth_client::DomainEvent::Instance { instance, .. }))) => {
                        let instance = serde_json::to_value(instance).expect("an instance");
                        if wanted(&instance) {
                            return instance;
                        }
                    }
                    Ok(Some(Ok(_))) => {}
                    Ok(Some(Err(e))) => panic!("the event stream failed: {e}"),
                    Ok(None) => panic!("the event stream ended before {what}"),
                }
            }
        })
    }

    /// The one bounded negative check: reads the domain's events for `within` (the first ones
    /// are every instance as it is now) and panics if any instance event shows `bad` (the
    /// instance as JSON). There is no positive signal for "this did not happen", so the check
    /// lasts a fixed time; a test uses it only for what must *not* happen, and says so.
    pub fn never(&mut self, within: Duration, what: &str, bad: impl Fn(&Value) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        block_on(async {
            loop {
                match tokio::time::timeout_at(deadline, self.events.next()).await {
                    Err(_) => return,
                    Ok(Some(Ok(berth_client::DomainEvent::Instance { instance, .. }))) => {
                        let instance = serde_json::to_value(instance).expect("an instance");
                        assert!(!bad(&instance), "{what}: {instance}");
                    }
                    Ok(Some(Ok(
                        berth_client::DomainEvent::Resync { .. }
                        | berth_client::DomainEvent::Copy { .. },
                    ))) => {}
                    Ok(Some(Err(e))) => panic!("the event stream failed: {e}"),
                    Ok(None) => panic!("the event stream ended while checking that {what}"),
                }
            }
        })
    }
}

/// Panics unless `result` is the daemon's error `tag` with `status` and a message (through
/// [`berth_client::ClientError::is`] and its status); returns the error's whole body, for the
/// fields particular to the tag.
pub fn refused<T: std::fmt::Debug>(
    result: Result<T, berth_client::ClientError>,
    status: u16,
    tag: &str,
) -> Value {
    let err = match result {
        Ok(answer) => panic!("expected {status} {tag}, the daemon answered {answer:?}"),
        Err(err) => err,
    };
    assert!(err.is(tag), "expected {tag}: {err:?}");
    assert_eq!(
        err.status(),
        Some(status),
        "expected {status} {tag}: {err:?}"
    );
    let api = err.api().expect("the daemon's error");
    assert!(!api.message.is_empty(), "{err:?}");
    api.body.clone()
}

/// An answer of the typed client as JSON, for the tests that look into its fields by name.
pub fn json_of<T: serde::Serialize>(answer: &T) -> Value {
    serde_json::to_value(answer).expect("an answer as JSON")
}

/// A cause of `up` by its wire name.
fn up_cause(cause: &str) -> berth_client::UpCause {
    match cause {
        "use" => berth_client::UpCause::Use,
        "person" => berth_client::UpCause::Person,
        other => panic!("no cause {other:?}"),
    }
}

/// `domain` as the typed client takes it; a panic naming it when it is no domain id.
pub fn domain_id(domain: &str) -> berth_client::DomainId {
    berth_client::DomainId::parse(domain)
        .unwrap_or_else(|| panic!("{domain:?} is not a resource domain id (rdm:<uuid>)"))
}
