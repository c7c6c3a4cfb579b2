//! What a front and its supervisor say to each other on the socket.

/// The version of what a front and its supervisor say to each other on a
/// session's connection (its acknowledgement, and the relay's
/// [`DELIVERED_NOTIFICATION`]s). A front refuses a supervisor that speaks
/// another: the two come from different versions of asynctask.
pub(crate) const RELAY_PROTOCOL: u64 = 2;
