//! Home of live migration (the VM-lifecycle issue): dirty-page logging
//! (`VHOST_USER_PROTOCOL_F_LOG_SHMFD`, `VHOST_F_LOG_ALL`, `SET_LOG_BASE`,
//! the per-ring `VHOST_VRING_F_LOG`), marking every page the backend writes
//! in guest memory while logging is on, and the announcement after the move
//! (`SEND_RARP`). Empty until that issue: named here so that it lands in a
//! room of its own, below the vhost-user protocol that hands it the log and
//! above the ring service that reports what it wrote.
