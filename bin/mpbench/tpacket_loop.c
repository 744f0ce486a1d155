/*
 * The reference forwarder for raw ports (`mpbench tpacket-loop A B`): the
 * least a C program does to move frames from one interface to another
 * through packet sockets' rings, with no table, no decision and one copy.
 *
 * A TPACKET_V3 receive ring on FROM, sized as mpbridge's block ring is (16
 * blocks of 256 KiB, 2 KiB frames, a block handed over when full or after
 * 1 ms), taken block by block, with poll(2) when the next block is still
 * the kernel's. Each frame of a block is copied into the next slot of a
 * TPACKET_V2 transmit ring on TO (512 slots of 2 KiB, PACKET_QDISC_BYPASS,
 * as mpbench's generator and trafgen send), and the block's frames are
 * handed to the driver with one send(2) (and one more each time the ring
 * fills before the block ends). A frame that finds its slot still the
 * kernel's after that is dropped, as a full transmit queue drops it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define RX_BLOCK_SIZE (1u << 18)
#define RX_BLOCKS 16u
#define RX_FRAME_SIZE (1u << 11)
#define RX_BLOCK_TIMEOUT_MS 1u
#define TX_SLOT_SIZE (1u << 11)
#define TX_SLOTS 512u

static int option(int fd, int name, const void *value, socklen_t len)
{
	return setsockopt(fd, SOL_PACKET, name, value, len) < 0 ? -errno : 0;
}

/* A packet socket bound to `ifname`, of TPACKET version `version`, with a
 * ring of `req` (PACKET_RX_RING or PACKET_TX_RING, `ring`) mapped at
 * `*map`; receiving every protocol when `receive`, none otherwise. */
static int ring_socket(const char *ifname, int version, int ring, const void *req,
		       socklen_t req_len, size_t map_len, int receive, void **map)
{
	int on = 1, error;
	uint16_t protocol = receive ? htons(ETH_P_ALL) : 0;
	struct sockaddr_ll addr = {
		.sll_family = AF_PACKET,
		.sll_protocol = protocol,
		.sll_ifindex = (int)if_nametoindex(ifname),
	};
	if (addr.sll_ifindex == 0)
		return -ENODEV;
	int fd = socket(AF_PACKET, SOCK_RAW, protocol);
	if (fd < 0)
		return -errno;
	if ((error = option(fd, PACKET_VERSION, &version, sizeof version)) ||
	    (receive && (error = option(fd, PACKET_IGNORE_OUTGOING, &on, sizeof on))) ||
	    (!receive && (error = option(fd, PACKET_QDISC_BYPASS, &on, sizeof on))) ||
	    (error = option(fd, ring, req, req_len)))
		goto fail;
	*map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (*map == MAP_FAILED) {
		error = -errno;
		goto fail;
	}
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		error = -errno;
		munmap(*map, map_len);
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return error;
}

/* Forwards every frame FROM receives to TO, until an error, which it
 * returns (a negative errno); it does not return otherwise. */
int mpbench_tpacket_forward(const char *from, const char *to)
{
	struct tpacket_req3 rx_req = {
		.tp_block_size = RX_BLOCK_SIZE,
		.tp_block_nr = RX_BLOCKS,
		.tp_frame_size = RX_FRAME_SIZE,
		.tp_frame_nr = RX_BLOCK_SIZE / RX_FRAME_SIZE * RX_BLOCKS,
		.tp_retire_blk_tov = RX_BLOCK_TIMEOUT_MS,
	};
	struct tpacket_req tx_req = {
		.tp_block_size = TX_SLOT_SIZE * TX_SLOTS,
		.tp_block_nr = 1,
		.tp_frame_size = TX_SLOT_SIZE,
		.tp_frame_nr = TX_SLOTS,
	};
	void *rx_map, *tx_map;
	int rx = ring_socket(from, TPACKET_V3, PACKET_RX_RING, &rx_req, sizeof rx_req,
			     (size_t)RX_BLOCK_SIZE * RX_BLOCKS, 1, &rx_map);
	if (rx < 0)
		return rx;
	int tx = ring_socket(to, TPACKET_V2, PACKET_TX_RING, &tx_req, sizeof tx_req,
			     (size_t)TX_SLOT_SIZE * TX_SLOTS, 0, &tx_map);
	if (tx < 0) {
		close(rx);
		return tx;
	}
	/* Where a slot's frame goes (no PACKET_TX_HAS_OFF). */
	const size_t tx_data = TPACKET2_HDRLEN - sizeof(struct sockaddr_ll);
	unsigned int block = 0, slot = 0;
	for (;;) {
		struct tpacket_block_desc *desc =
			(void *)((char *)rx_map + (size_t)block * RX_BLOCK_SIZE);
		uint32_t status = __atomic_load_n(&desc->hdr.bh1.block_status, __ATOMIC_ACQUIRE);
		if (!(status & TP_STATUS_USER)) {
			struct pollfd wait = { .fd = rx, .events = POLLIN | POLLERR };
			if (poll(&wait, 1, -1) < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		uint32_t frames = desc->hdr.bh1.num_pkts;
		struct tpacket3_hdr *frame =
			(void *)((char *)desc + desc->hdr.bh1.offset_to_first_pkt);
		for (uint32_t i = 0; i < frames; i++) {
			struct tpacket2_hdr *out =
				(void *)((char *)tx_map + (size_t)slot * TX_SLOT_SIZE);
			uint32_t len = frame->tp_snaplen;
			/* A block holds more small frames than the ring has
			 * slots: the ones filled go out first. */
			if (__atomic_load_n(&out->tp_status, __ATOMIC_ACQUIRE) !=
			    TP_STATUS_AVAILABLE)
				send(tx, NULL, 0, MSG_DONTWAIT);
			if (__atomic_load_n(&out->tp_status, __ATOMIC_ACQUIRE) ==
				    TP_STATUS_AVAILABLE &&
			    len <= TX_SLOT_SIZE - tx_data) {
				memcpy((char *)out + tx_data, (char *)frame + frame->tp_mac, len);
				out->tp_len = len;
				__atomic_store_n(&out->tp_status, TP_STATUS_SEND_REQUEST,
						 __ATOMIC_RELEASE);
				slot = (slot + 1) % TX_SLOTS;
			}
			frame = (void *)((char *)frame + frame->tp_next_offset);
		}
		__atomic_store_n(&desc->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
		block = (block + 1) % RX_BLOCKS;
		if (send(tx, NULL, 0, MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != ENOBUFS &&
		    errno != EINTR)
			return -errno;
	}
}
