// Client-disconnect detection for cpp-httplib 0.11 (Debian 12), whose Request does not
// expose the connection's socket. We find the socket by its address pair (the handler
// thread owns that connection while it runs, so the fd stays valid) and ask the kernel
// whether the peer has hung up. Without this a non-streaming request would run to the
// end after its client left, holding a slot.
#pragma once

#include <string>

namespace treespec::server {

// The fd of this process's TCP socket with the given local port and peer (address,
// port); -1 if none (detection is then skipped).
int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer closed its side or the socket failed. Never blocks.
bool peer_closed(int fd);

}  // namespace treespec::server
