//! Pure decoders for mlx5 doorbells, WQEs and devx mailboxes.
