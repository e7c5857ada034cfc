package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xrdmon/xrdmon/internal/source"
)

// Format is a capture file format.
type Format int

// The capture formats PcapWriter writes.
const (
	Pcap   Format = iota // classic libpcap, microsecond timestamps
	PcapNG               // pcapng
)

// PcapWriter writes UDP datagrams as a capture of Ethernet frames, for the
// load generator and tests. Not safe for concurrent use.
type PcapWriter struct {
	dst   netip.AddrPort
	w     *pcapgo.Writer
	ng    *pcapgo.NgWriter
	frame []byte
}

// NewPcapWriter writes the capture header to w. Every datagram is addressed
// to dst; IPv4 senders need an IPv4 dst, IPv6 senders an IPv6 one (an
// IPv4 dst is used IPv4-mapped for IPv6 senders).
func NewPcapWriter(w io.Writer, dst netip.AddrPort, format Format) (*PcapWriter, error) {
	pw := &PcapWriter{dst: dst}
	switch format {
	case Pcap:
		pw.w = pcapgo.NewWriter(w)
		if err := pw.w.WriteFileHeader(65535+100, layers.LinkTypeEthernet); err != nil {
			return nil, fmt.Errorf("write pcap header: %w", err)
		}
	case PcapNG:
		ng, err := pcapgo.NewNgWriter(w, layers.LinkTypeEthernet)
		if err != nil {
			return nil, fmt.Errorf("write pcapng header: %w", err)
		}
		pw.ng = ng
	default:
		return nil, fmt.Errorf("unknown capture format %d", format)
	}
	return pw, nil
}

// WritePacket writes p as one frame, timestamped p.Received.
func (pw *PcapWriter) WritePacket(p source.Packet) error {
	var err error
	pw.frame, err = appendFrame(pw.frame[:0], layers.LinkTypeEthernet, p.Sender, pw.dst, p.Data)
	if err != nil {
		return err
	}
	ci := gopacket.CaptureInfo{Timestamp: p.Received, CaptureLength: len(pw.frame), Length: len(pw.frame)}
	if pw.ng != nil {
		err = pw.ng.WritePacket(ci, pw.frame)
	} else {
		err = pw.w.WritePacket(ci, pw.frame)
	}
	if err != nil {
		return fmt.Errorf("write capture packet: %w", err)
	}
	return nil
}

// Flush writes buffered data (pcapng buffers; pcap does not).
func (pw *PcapWriter) Flush() error {
	if pw.ng != nil {
		if err := pw.ng.Flush(); err != nil {
			return fmt.Errorf("flush pcapng: %w", err)
		}
	}
	return nil
}

// WritePcap writes packets to w as a pcap capture addressed to dst.
func WritePcap(w io.Writer, dst netip.AddrPort, packets []source.Packet) error {
	pw, err := NewPcapWriter(w, dst, Pcap)
	if err != nil {
		return err
	}
	for _, p := range packets {
		if err := pw.WritePacket(p); err != nil {
			return err
		}
	}
	return pw.Flush()
}

var errTooBig = errors.New("datagram too large for one frame")

// appendFrame appends a frame of the given link type carrying one UDP
// datagram from src to dst, with correct IPv4 and UDP checksums.
func appendFrame(b []byte, link layers.LinkType, src, dst netip.AddrPort, payload []byte) ([]byte, error) {
	v6 := src.Addr().Is6() && !src.Addr().Is4In6()
	srcIP, dstIP := src.Addr().Unmap(), dst.Addr().Unmap()
	if v6 && dstIP.Is4() {
		dstIP = netip.AddrFrom16(dstIP.As16())
	} else if !v6 && !dstIP.Is4() {
		return b, fmt.Errorf("frame from %s to %s: address families differ", src, dst)
	}
	et := uint16(etherTypeIPv4)
	if v6 {
		et = etherTypeIPv6
	}
	switch link {
	case layers.LinkTypeEthernet:
		b = append(b, 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1)
		b = binary.BigEndian.AppendUint16(b, et)
	case layers.LinkTypeLinuxSLL:
		b = append(b, 0, 0, 0, 1, 0, 6, 0x02, 0, 0, 0, 0, 1, 0, 0)
		b = binary.BigEndian.AppendUint16(b, et)
	case layers.LinkTypeLinuxSLL2:
		b = binary.BigEndian.AppendUint16(b, et)
		b = append(b, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 0x02, 0, 0, 0, 0, 1, 0, 0)
	case layers.LinkTypeNull:
		fam := uint32(2)
		if v6 {
			fam = 10
		}
		b = binary.LittleEndian.AppendUint32(b, fam)
	case layers.LinkTypeLoop:
		fam := uint32(2)
		if v6 {
			fam = 24
		}
		b = binary.BigEndian.AppendUint32(b, fam)
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
	default:
		return b, fmt.Errorf("write frame: %w", errUnsupported)
	}
	ulen := 8 + len(payload)
	ipStart := len(b)
	if v6 {
		if ulen > 65535 {
			return b, errTooBig
		}
		b = append(b, 0x60, 0, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(ulen))
		b = append(b, 17, 64)
		s, d := srcIP.As16(), dstIP.As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	} else {
		if 20+ulen > 65535 {
			return b, errTooBig
		}
		b = append(b, 0x45, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(20+ulen))
		b = append(b, 0, 0, 0x40, 0, 64, 17, 0, 0) // DF, TTL 64, UDP, checksum later
		s, d := srcIP.As4(), dstIP.As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		binary.BigEndian.PutUint16(b[ipStart+10:], ^fold(sum(0, b[ipStart:])))
	}
	udpStart := len(b)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(ulen))
	b = append(b, 0, 0)
	b = append(b, payload...)
	// Pseudo-header: addresses, protocol, UDP length.
	var s uint32
	if v6 {
		s = sum(s, b[ipStart+8:ipStart+40])
	} else {
		s = sum(s, b[ipStart+12:ipStart+20])
	}
	s += 17 + uint32(ulen)
	s = sum(s, b[udpStart:])
	c := ^fold(s)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[udpStart+6:], c)
	return b, nil
}

func sum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
