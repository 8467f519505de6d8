//! What each data node says: its `CLUSTER NODES`, `CLUSTER INFO` and replication link, asked
//! of every pod at once.
//!
//! A node the operator cannot reach is `Unknown`, unless a majority of the other pods' views
//! flag it `fail` (Redis's own verdict, agreed by a majority of its primaries): then it is
//! `Unhealthy`. The operator's own failure to connect is never evidence that a node is down.

use std::{collections::BTreeMap, net::SocketAddr};

use quorum_core::availability::{
    health::{Health, classify},
    retry::Idempotency,
};

use super::decide::{NodeFact, NodeView};
use crate::{address::Kind, admin::info::Role, pass::Pass};

/// Asks pods `0..count`; `recorded_ids` (from status) name the nodes that do not answer, so
/// the others' testimony about them can be found.
pub async fn observe_nodes(
    pass: &Pass<'_>,
    count: usize,
    recorded_ids: &BTreeMap<usize, String>,
) -> Vec<NodeFact> {
    let clients = &pass.context.state.clients;
    let asks = (0..count).map(|ordinal| async move {
        let address = pass.addresses.resolve(Kind::Node, ordinal).await;
        let answer = clients
            .node(
                &pass.key,
                &pass.addresses,
                ordinal,
                "cluster_view",
                Idempotency::Read,
                |admin| async move {
                    let nodes = admin.cluster_nodes().await?;
                    let info = admin.cluster_info().await?;
                    let replication = admin.replication_info().await?;
                    Ok(NodeView {
                        nodes,
                        state_ok: info.state_ok,
                        link_up: replication.role == Role::Replica && replication.link_up,
                        replicating_from: replication.primary_address(),
                        offset: replication.offset,
                    })
                },
            )
            .await;
        (ordinal, address, answer)
    });
    let answers = futures::future::join_all(asks).await;
    let views: Vec<&NodeView> = answers
        .iter()
        .filter_map(|(_, _, answer)| answer.as_ref().ok())
        .collect();
    let testimony = |ordinal: usize, address: Option<SocketAddr>| -> Vec<bool> {
        views
            .iter()
            .filter_map(|view| {
                view.nodes.iter().find(|line| match recorded_ids.get(&ordinal) {
                    Some(id) => line.id == *id,
                    None => address.is_some() && line.address == address && !line.flags.handshake,
                })
            })
            .filter(|line| !line.flags.myself)
            .map(|line| !line.flags.failed)
            .collect()
    };
    let nodes: Vec<NodeFact> = answers
        .iter()
        .map(|(ordinal, address, answer)| match answer {
            Ok(view) => NodeFact {
                ordinal: *ordinal,
                address: *address,
                health: Health::Healthy,
                view: Some(view.clone()),
            },
            Err(error) => NodeFact {
                ordinal: *ordinal,
                address: *address,
                health: classify(
                    Err(error.to_string()),
                    &testimony(*ordinal, *address),
                    count.saturating_sub(1),
                ),
                view: None,
            },
        })
        .collect();
    nodes
}
