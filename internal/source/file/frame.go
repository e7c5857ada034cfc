package file

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
)

// Why a captured frame yields no datagram. Each is a value of the reason
// label of xrdmon_file_frames_skipped_total.
var (
	errNotUDP      = errors.New("not_udp")
	errFragment    = errors.New("ip_fragment")
	errTruncated   = errors.New("truncated")
	errMalformed   = errors.New("malformed")
	errUnsupported = errors.New("unsupported_link")
)

var skipReasons = []error{errNotUDP, errFragment, errTruncated, errMalformed, errUnsupported}

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	etherTypeQinQ = 0x88A8
)

// udpPayload finds the UDP datagram in one captured frame of the given link
// type and returns its payload (a view into frame) and its source address.
func udpPayload(link layers.LinkType, frame []byte) ([]byte, netip.AddrPort, error) {
	switch link {
	case layers.LinkTypeEthernet:
		if len(frame) < 14 {
			return nil, netip.AddrPort{}, errMalformed
		}
		et := binary.BigEndian.Uint16(frame[12:])
		frame = frame[14:]
		for et == etherTypeVLAN || et == etherTypeQinQ {
			if len(frame) < 4 {
				return nil, netip.AddrPort{}, errMalformed
			}
			et = binary.BigEndian.Uint16(frame[2:])
			frame = frame[4:]
		}
		return ipByEtherType(et, frame)
	case layers.LinkTypeLinuxSLL:
		if len(frame) < 16 {
			return nil, netip.AddrPort{}, errMalformed
		}
		return ipByEtherType(binary.BigEndian.Uint16(frame[14:]), frame[16:])
	case layers.LinkTypeLinuxSLL2:
		if len(frame) < 20 {
			return nil, netip.AddrPort{}, errMalformed
		}
		return ipByEtherType(binary.BigEndian.Uint16(frame[0:]), frame[20:])
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12: // 12: raw IP on OpenBSD
		return ipPayload(frame)
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		// A 4-byte address family (host order for Null, network order for
		// Loop; its values differ between systems): the IP version nibble says
		// the same.
		if len(frame) < 4 {
			return nil, netip.AddrPort{}, errMalformed
		}
		return ipPayload(frame[4:])
	}
	return nil, netip.AddrPort{}, errUnsupported
}

func ipByEtherType(et uint16, pkt []byte) ([]byte, netip.AddrPort, error) {
	switch et {
	case etherTypeIPv4, etherTypeIPv6:
		return ipPayload(pkt)
	}
	return nil, netip.AddrPort{}, errNotUDP
}

func ipPayload(pkt []byte) ([]byte, netip.AddrPort, error) {
	if len(pkt) < 1 {
		return nil, netip.AddrPort{}, errMalformed
	}
	switch pkt[0] >> 4 {
	case 4:
		return ipv4Payload(pkt)
	case 6:
		return ipv6Payload(pkt)
	}
	return nil, netip.AddrPort{}, errNotUDP
}

func ipv4Payload(pkt []byte) ([]byte, netip.AddrPort, error) {
	if len(pkt) < 20 {
		return nil, netip.AddrPort{}, errMalformed
	}
	ihl := int(pkt[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(pkt[2:]))
	if ihl < 20 || total < ihl || len(pkt) < ihl {
		return nil, netip.AddrPort{}, errMalformed
	}
	if pkt[9] != 17 {
		return nil, netip.AddrPort{}, errNotUDP
	}
	if frag := binary.BigEndian.Uint16(pkt[6:]); frag&0x2000 != 0 || frag&0x1fff != 0 {
		return nil, netip.AddrPort{}, errFragment
	}
	src := netip.AddrFrom4([4]byte(pkt[12:16]))
	if len(pkt) > total {
		pkt = pkt[:total] // Ethernet padding
	}
	return udp(pkt[ihl:], src, total-ihl)
}

func ipv6Payload(pkt []byte) ([]byte, netip.AddrPort, error) {
	if len(pkt) < 40 {
		return nil, netip.AddrPort{}, errMalformed
	}
	plen := int(binary.BigEndian.Uint16(pkt[4:]))
	next := pkt[6]
	src := netip.AddrFrom16([16]byte(pkt[8:24]))
	rest := pkt[40:]
	if len(rest) > plen {
		rest = rest[:plen]
	}
	for {
		switch next {
		case 17:
			return udp(rest, src, -1)
		case 44:
			return nil, netip.AddrPort{}, errFragment
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(rest) < 8 {
				return nil, netip.AddrPort{}, errTruncated
			}
			n := (int(rest[1]) + 1) * 8
			if len(rest) < n {
				return nil, netip.AddrPort{}, errTruncated
			}
			next, rest = rest[0], rest[n:]
		default:
			return nil, netip.AddrPort{}, errNotUDP
		}
	}
}

// udp returns the payload of the UDP datagram seg. ipLen is the length the
// IP header declares for seg (-1: take it from seg).
func udp(seg []byte, src netip.Addr, ipLen int) ([]byte, netip.AddrPort, error) {
	if len(seg) < 8 {
		if ipLen >= 0 && ipLen >= 8 {
			return nil, netip.AddrPort{}, errTruncated
		}
		return nil, netip.AddrPort{}, errMalformed
	}
	port := binary.BigEndian.Uint16(seg[0:])
	ulen := int(binary.BigEndian.Uint16(seg[4:]))
	if ulen < 8 || ipLen >= 0 && ulen > ipLen {
		return nil, netip.AddrPort{}, errMalformed
	}
	if ulen > len(seg) {
		return nil, netip.AddrPort{}, errTruncated // cut by the snap length
	}
	return seg[8:ulen], netip.AddrPortFrom(src.Unmap(), port), nil
}
