//! The real node's `RuntimeClass` (issue 30 item 4): `buzz-runc`
//! (`node.k8s.io/v1`), whose handler is the runc runtime the node's
//! containerd config names `runc` (`real_node/config.rs`,
//! `containerd.runtimes.runc`). A deploy with
//! `provider_config.runtime_class_name: buzz-runc` so runs exactly as one
//! without it, through the RuntimeClass admission plugin and the kubelet's
//! handler lookup: the path a gVisor or Kata class takes on a real cluster.
//!
//! Idempotent: an existing class of that name is left as it is (a node
//! restarted on the same etcd keeps it).

use super::Result;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// The class's name.
pub const NAME: &str = "buzz-runc";
/// The containerd runtime handler it selects (the node's runc runtime).
pub const HANDLER: &str = "runc";

/// Creates [`NAME`] unless it exists.
pub async fn ensure(client: Client) -> Result<()> {
    let api: Api<RuntimeClass> = Api::all(client);
    let class = RuntimeClass {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            ..Default::default()
        },
        handler: HANDLER.into(),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
