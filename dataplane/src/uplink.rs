//! Home of the uplink port (the AF_XDP issue): a port on the switch whose
//! queues are AF_XDP sockets on a NIC's queues, served by queue workers
//! that step the same executor and policies as a VM ring (EE-KBP's
//! NIC-to-VM path). Empty until that issue: named here so that it lands
//! beside the other egress kinds of the switch.
