// Package correlate turns decoded XRootD monitoring packets into transfer
// records (record.Record, one per file access) and g-stream events
// (record.Event), per server, with loss accounting.
//
// # Sharding
//
// A Shard holds the state of the servers routed to it and is used by one
// goroutine. ShardOf(sender IP, n) routes every packet of a sender to the
// same shard, so one server's packets are applied in order and shards
// share nothing. The routing is a fixed hash, the same in every process,
// because checkpoints are restored by shard index.
//
// # Keys
//
// State lives under a server incarnation: (sender IP, stod, sID) (§7.1).
// The sID comes from every packet kind: the decimal sid in the userid of
// map records (text between the last ':' before the first '@' and that
// '@'), the isTime of f packets, the first WINDOW mark of t packets, the r
// and g headers. A packet without one (pre-v4.4 isTime) goes to the latest
// incarnation of (sender IP, stod). Sessions (u), and files (isOpen, d)
// are keyed by (incarnation, dictid), never by userid text, which is not
// unique (xrootd issue 2133). T and U records attach by their &Uc= dictid
// (waiting PendingTTL for a u that comes later); i records, which have no
// such link, attach to the latest session with the same userid text; a d
// record gives the path of the file with the same dictid and links it to
// the latest session with its userid text when the open carried no user.
//
// A new stod from the same sender IP and sID is a restart: the old
// incarnation's open files are emitted at once as server_restart; the old
// incarnation stays (late packets with the old stod still apply to it)
// until it has been idle PendingTTL. dictids of the two never mix.
//
// # Records and times
//
// Times come from the server's f-stream isTime windows, never from the
// collector's clock (which only drives TTLs and Record.Received):
//
//   - Start: tBeg of the f packet holding the isOpen (the earliest the open
//     can have happened). Without an open seen: tBeg of the first packet
//     that mentioned the file (its isXfr or isClose).
//   - End of a complete or no_open record: tEnd of the packet holding the
//     isClose (the latest the close can have happened).
//   - End of other partial records: tEnd of the last packet that mentioned
//     the file (its open or last isXfr); for disconnect, of the packet
//     holding the isDisc.
//
// So [Start, End] always contains the access. Byte counts of a partial
// record are those of the last isXfr (cumulative since open); a record
// with a close takes the close's counts and OPS/SSQ.
//
// Reasons (record.Reason): complete (open and close seen); no_open (a
// close whose open never came: it waits PendingTTL for a reordered open,
// which completes it); disconnect (isDisc of the session with the file
// still open: the file waits PendingTTL for a reordered close, then is
// emitted); timeout (no news for OpenTTL); server_restart; evicted (memory
// bound, least recently used first, or an open of a file id still held);
// end_of_input (Flush). RecordID is record.RecordID(server IP, stod, sID,
// file dictid, Start, End): replaying the same packets gives the same ids.
//
// g-stream: every line of a g packet (binary or text header) becomes an
// Event typed by record.ParseEvent, at the packet's tEnd, with
// record.EventID(server, provider, pseq, tEnd, line index, line).
// t-stream, r-stream and FRM p/x packets are accounted (and their
// sequence numbers tracked) but make no records.
//
// # Accounting and loss
//
// Every datagram is counted in Stats.Packets and in exactly one of
// Accounted (valid; applied, or recognised as a duplicate and not applied)
// or Rejected (by RejectReason: the decoder's packet.Reason, or summary
// for XML/JSON summary datagrams). Lost counts missing packets per
// sequence domain (§7.4): main (= d i T u U t r), f-stream, g per provider,
// FRM per FRM process, each per incarnation. A horizon of the last 64
// sequence numbers decides: a skipped number is lost only when it leaves
// the horizon unfilled; a late arrival within it fills its hole
// (Reordered), and one older than the earliest packet seen extends the
// stream back to it, so loss does not depend on arrival order; one seen
// before with the same bytes (each number keeps the fingerprint of its
// last datagram, checkpointed, so a redelivery after a restore is
// recognised) is a Duplicate; one behind the horizon is Stale. Holes still in the horizon when an
// incarnation ends (or at Flush) are lost. A rejected packet whose header and server are
// known still marks its sequence number as received.
//
// # Memory
//
// Every table is bounded (Config): open files and sessions per server and
// in total, pending references, servers. Open files cost about 135 bytes
// each without the path text (TestMemoryPerOpenFile): a 112-byte entry in
// a slab with intrusive lists, plus its map slot. LRU order is kept
// lazily: news only stamps the entry, and an entry that reaches a list's
// head with news since it was queued is queued again (second chance), so
// an isXfr costs one map lookup whatever the number of open files.
// Repeated strings (names, hosts, VOs, paths, login payloads) are
// interned in bounded tables; invalid UTF-8 becomes U+FFFD. Each sequence
// counter in use keeps a fingerprint per number (1 KB; 4 KB for a text
// g-stream's 0..999), 2-3 KB per server.
//
// # Checkpoints
//
// Shard.Snapshot writes the whole state (incarnations with their ident
// fields and sequence windows, sessions with login, token, U and i data,
// open and waiting files with their counts, times and LRU order, pending
// references, and the counters) in a compact versioned binary format
// (described in snapshot.go: magic, version, varints, CRC-32C trailer);
// RestoreShard reads it back into a shard that behaves exactly as the
// snapshotted one would: a restart between any two packets gives the same
// records (ids included), events and Stats as an uninterrupted run
// (TestSnapshotEverySplit). Corrupt input is an error, never a panic.
// With 100,000 open files a snapshot is about 9 MB (90 bytes per file,
// paths included) and takes about 10 ms; a restore about 40 ms.
package correlate
