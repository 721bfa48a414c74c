/* The mlx5 command mailbox fields the software NIC reads and writes (devx.c), as bit offsets and
 * widths in the PRM's layout (the mlx5_ifc "*_bits" structures of rdma-core, the kernel and
 * NVSHMEM describe the same layout): a mailbox is an array of big-endian dwords; a field of width
 * w at bit b lives in dword b / 32, shifted left by 32 - w - b % 32; 64-bit fields are big-endian
 * at byte b / 8. Offsets were derived from the public layout and cross-checked against
 * reference/hardware-and-hooks.md §3 and sigmatop's own decoder (src/decode/devx.rs).
 */
#ifndef TESTNIC_IFC_H
#define TESTNIC_IFC_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/* Command opcodes */
#define IFC_QUERY_HCA_CAP 0x100
#define IFC_CREATE_CQ 0x400
#define IFC_DESTROY_CQ 0x401
#define IFC_CREATE_QP 0x500
#define IFC_DESTROY_QP 0x501
#define IFC_RST2INIT_QP 0x502
#define IFC_INIT2RTR_QP 0x503
#define IFC_RTR2RTS_QP 0x504
#define IFC_RTS2RTS_QP 0x505
#define IFC_2ERR_QP 0x507
#define IFC_2RST_QP 0x50a
#define IFC_QUERY_QP 0x50b
#define IFC_INIT2INIT_QP 0x50e
#define IFC_QUERY_CQ 0x402
#define IFC_QUERY_ROCE_ADDRESS 0x760

/* Command status values in the output mailbox */
#define IFC_STATUS_OK 0x0
#define IFC_STATUS_BAD_OP 0x2
#define IFC_STATUS_BAD_PARAM 0x3
#define IFC_STATUS_BAD_RESOURCE 0x5
#define IFC_STATUS_BAD_QP_STATE 0x10

/* Every command: opcode and op_mod in; status and syndrome out. */
#define IN_OPCODE 0x00, 16
#define IN_OP_MOD 0x30, 16
#define OUT_STATUS 0x00, 8
#define OUT_SYNDROME 0x20, 32
#define IN_QPN 0x48, 24       /* the modify/destroy/query QP commands */
#define IN_CQN 0x48, 24       /* DESTROY_CQ */
#define OUT_OBJ_NUM 0x48, 24  /* CREATE_CQ: cqn, CREATE_QP: qpn */

/* QUERY_HCA_CAP: op_mod = cap type << 1 | current; the capability starts at bit 0x80 of the out box */
#define CAP_GENERAL 0
#define CAP_ATOMIC 3
#define CAP_ROCE 4
#define CAP_BASE 0x80
#define CAP_OUT_BYTES (0x80 / 8 + 0x1000)
/* cmd_hca_cap */
#define HCA_CQE_VERSION 0x1fc, 4
#define HCA_COMPACT_AV 0x200, 1
#define HCA_LOG_BF_REG_SIZE 0x26b, 5
#define HCA_LOG_MAX_QP_SZ 0x88, 8
#define HCA_PORT_TYPE 0x1b6, 2 /* 1 = Ethernet */
#define HCA_RC 0x23f, 1
#define HCA_MAX_WQE_SZ_SQ 0x290, 16
#define HCA_MAX_WQE_SZ_RQ 0x2b0, 16
/* roce_cap (QUERY_HCA_CAP type 4) */
#define ROCE_VERSION 0x98, 8
#define ROCE_MAX_SRC_UDP_PORT 0xc0, 16
#define ROCE_MIN_SRC_UDP_PORT 0xd0, 16
#define ROCE_ADDRESS_TABLE_SIZE 0xf0, 16
/* QUERY_ROCE_ADDRESS: in, and the roce_addr_layout at bit 0x80 of the out box */
#define ROCE_ADDR_IN_INDEX 0x40, 16
#define ROCE_ADDR_BASE 0x80
#define ROCE_ADDR_L3 0x00 /* 16 bytes: the GID */
#define ROCE_ADDR_L3_TYPE 0xd4, 4
#define ROCE_ADDR_VERSION 0xd8, 8
#define ROCE_ADDR_OUT_BYTES 48
/* atomic_caps */
#define ATOM_REQ_8B_ENDIAN_MODE 0x40, 2
#define ATOM_SUPPORTED_8B_ENDIAN_MODE_1 0x46, 1
#define ATOM_OPERATIONS 0x90, 16
#define ATOM_SIZE_QP 0xb0, 16
#define ATOM_SIZE_DC 0xd0, 16

/* CREATE_CQ: the CQ context at bit 0x80 */
#define CQ_IN_CQC 0x80
#define CQ_IN_UMEM_OFFSET 0x280 /* 64 */
#define CQ_IN_UMEM_ID 0x2c0, 32
#define CQ_IN_UMEM_VALID 0x2e0, 1
#define CQC_DBR_UMEM_VALID 0x06, 1
#define CQC_CQE_SZ 0x08, 3
#define CQC_CC 0x0b, 1
#define CQC_OI 0x0e, 1
#define CQC_DBR_UMEM_ID 0x20, 32
#define CQC_LOG_CQ_SIZE 0x63, 5
#define CQC_UAR_PAGE 0x68, 24
#define CQC_C_EQN 0xb8, 8
#define CQC_DBR_ADDR 0x1c0 /* 64 */

/* CREATE_QP and the QP transitions: the QP context at bit 0xc0 */
#define QP_IN_QPC 0xc0
#define QP_IN_WQ_UMEM_OFFSET 0x800 /* 64 */
#define QP_IN_WQ_UMEM_ID 0x840, 32
#define QP_IN_WQ_UMEM_VALID 0x860, 1
#define QPC_STATE 0x00, 4 /* PRM_QP_* below */
#define QPC_ST 0x08, 8
#define QPC_PM_STATE 0x13, 2
#define QPC_PD 0x28, 24
#define QPC_MTU 0x40, 3
#define QPC_LOG_MSG_MAX 0x43, 5
#define QPC_LOG_RQ_SIZE 0x49, 4
#define QPC_LOG_RQ_STRIDE 0x4d, 3
#define QPC_NO_SQ 0x50, 1
#define QPC_LOG_SQ_SIZE 0x51, 4
#define QPC_UAR_PAGE 0x68, 24
#define QPC_USER_INDEX 0x88, 24
#define QPC_REMOTE_QPN 0xa8, 24
#define QPC_ADS 0xc0 /* primary address path */
#define QPC_LOG_ACK_REQ_FREQ 0x380, 4
#define QPC_LOG_SRA_MAX 0x388, 3
#define QPC_RETRY_COUNT 0x38d, 3
#define QPC_RNR_RETRY 0x390, 3
#define QPC_NEXT_SEND_PSN 0x3c8, 24
#define QPC_CQN_SND 0x3e8, 24
#define QPC_RRE 0x490, 1
#define QPC_RWE 0x491, 1
#define QPC_RAE 0x492, 1
#define QPC_LOG_RRA_MAX 0x488, 3
#define QPC_ATOMIC_MODE 0x48c, 4
#define QPC_MIN_RNR_NAK 0x4a3, 5
#define QPC_NEXT_RCV_PSN 0x4a8, 24
#define QPC_CQN_RCV 0x4e8, 24
#define QPC_DBR_ADDR 0x500 /* 64 */
#define QPC_RQ_TYPE 0x565, 3
#define QPC_SRQN 0x568, 24
#define QPC_DC_ACCESS_KEY 0x640 /* 64 */
#define QPC_DBR_UMEM_VALID 0x683, 1
#define QPC_DBR_UMEM_ID 0x720, 32
#define QPC_BYTES (0x740 / 8) /* the QP context: bits 0xc0..0x800 of CREATE_QP, the modify commands
				  * and QUERY_QP's output */
/* address path (ads), relative to QPC_ADS; 0x160 bits */
#define ADS_BITS 0x160
#define ADS_PKEY_INDEX 0x10, 16
#define ADS_GRH 0x28, 1
#define ADS_RLID 0x30, 16
#define ADS_ACK_TIMEOUT 0x40, 5
#define ADS_SRC_ADDR_INDEX 0x48, 8
#define ADS_STAT_RATE 0x54, 4
#define ADS_HOP_LIMIT 0x58, 8
#define ADS_TCLASS 0x64, 8
#define ADS_FLOW_LABEL 0x6c, 20
#define ADS_RGID 0x80 /* 16 bytes */
#define ADS_DSCP 0x10a, 6
#define ADS_UDP_SPORT 0x110, 16
#define ADS_SL 0x124, 4
#define ADS_VHCA_PORT_NUM 0x128, 8

/* Mailbox sizes (bytes) */
#define CREATE_CQ_IN_BYTES 272
#define CREATE_QP_IN_BYTES 280
#define MODIFY_QP_IN_BYTES 272
#define CMD_OUT_BYTES 16
#define QUERY_QP_IN_BYTES 16
#define QUERY_QP_OUT_BYTES 272 /* query_qp_out: status, syndrome, opt_param_mask, the QPC at bit 0xc0,
				* 0x80 reserved bits (no PAS list: the QP's buffers are umems) */
#define QUERY_QP_OUT_QPC 0xc0
#define QUERY_CAP_IN_BYTES 16
#define QUERY_CAP_OUT_BYTES 4112

/* QPC state (qpc.state) */
#define PRM_QP_RST 0x0
#define PRM_QP_INIT 0x1
#define PRM_QP_RTR 0x2
#define PRM_QP_RTS 0x3
#define PRM_QP_SQER 0x4
#define PRM_QP_SQD 0x5
#define PRM_QP_ERR 0x6

#define RQ_TYPE_REGULAR 0
#define RQ_TYPE_SRQ 1
#define RQ_TYPE_ZERO 3

static inline uint32_t ifc_get(const void *box, uint32_t bit, uint32_t width)
{
	uint32_t dw;
	memcpy(&dw, (const uint8_t *)box + bit / 32 * 4, 4);
	dw = be32toh(dw);
	if (width == 32)
		return dw;
	return (dw >> (32 - width - bit % 32)) & ((1u << width) - 1);
}

static inline void ifc_set(void *box, uint32_t bit, uint32_t width, uint32_t v)
{
	uint8_t *p = (uint8_t *)box + bit / 32 * 4;
	uint32_t dw;
	memcpy(&dw, p, 4);
	dw = be32toh(dw);
	if (width == 32) {
		dw = v;
	} else {
		uint32_t shift = 32 - width - bit % 32, mask = ((1u << width) - 1) << shift;
		dw = (dw & ~mask) | ((v << shift) & mask);
	}
	dw = htobe32(dw);
	memcpy(p, &dw, 4);
}

static inline uint64_t ifc_get64(const void *box, uint32_t bit)
{
	uint64_t v;
	memcpy(&v, (const uint8_t *)box + bit / 8, 8);
	return be64toh(v);
}

/* GET(box, base, FIELD) / SET(box, base, FIELD, v): FIELD ("bit, width") of a structure that
 * starts at bit `base` of the mailbox. */
#define IFC_BIT_(b, w) (b)
#define IFC_WIDTH_(b, w) (w)
#define IFC_BIT(...) IFC_BIT_(__VA_ARGS__)
#define IFC_WIDTH(...) IFC_WIDTH_(__VA_ARGS__)
#define GET(box, base, F) ifc_get((box), (base) + IFC_BIT(F), IFC_WIDTH(F))
#define SET(box, base, F, v) ifc_set((box), (base) + IFC_BIT(F), IFC_WIDTH(F), (v))

#endif
