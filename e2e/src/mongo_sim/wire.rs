//! OP_MSG framing (opcode 2013), the only opcode the driver sends.
//!
//! A request's kind-1 sections (document sequences, which the driver uses for `insert`'s
//! `documents` and `delete`'s `deletes`) are folded into the command document as arrays, so
//! commands read one document whichever way the client sent it. Replies are always one kind-0
//! section without flags: `moreToCome` is never set, so a client never waits on a stream.

use bson::Document;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const OP_MSG: i32 = 2013;
/// What the sim advertises as `maxMessageSizeBytes`, and refuses beyond.
pub const MAX_MESSAGE_SIZE: usize = 48_000_000;

const CHECKSUM_PRESENT: u32 = 1;
/// The client does not want a reply (unacknowledged writes).
pub const MORE_TO_COME: u32 = 1 << 1;

/// One request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub request_id: i32,
    pub flags: u32,
    pub command: Document,
}

impl Request {
    pub fn wants_reply(&self) -> bool {
        self.flags & MORE_TO_COME == 0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection closed")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed message: {0}")]
    Malformed(String),
}

fn malformed(what: impl Into<String>) -> WireError {
    WireError::Malformed(what.into())
}

/// Reads one message. A clean end of stream before a header is [`WireError::Closed`].
pub async fn read_request<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Request, WireError> {
    let mut header = [0u8; 16];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Err(WireError::Closed),
        Err(error) => return Err(error.into()),
    }
    let length = i32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let request_id = i32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let op_code = i32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    if length < 21 || length as usize > MAX_MESSAGE_SIZE {
        return Err(malformed(format!("message length {length}")));
    }
    let mut body = vec![0u8; length as usize - 16];
    reader.read_exact(&mut body).await?;
    if op_code != OP_MSG {
        return Err(malformed(format!(
            "opcode {op_code}: only OP_MSG (2013) is spoken"
        )));
    }
    let (flags, command) = parse_op_msg_body(&body)?;
    Ok(Request {
        request_id,
        flags,
        command,
    })
}

/// Flags and the command (kind-0 document with kind-1 sequences folded in) of an OP_MSG body.
pub fn parse_op_msg_body(body: &[u8]) -> Result<(u32, Document), WireError> {
    if body.len() < 5 {
        return Err(malformed("OP_MSG shorter than its flags and one section"));
    }
    let flags = u32::from_le_bytes(body[0..4].try_into().expect("4 bytes"));
    let mut end = body.len();
    if flags & CHECKSUM_PRESENT != 0 {
        end = end
            .checked_sub(4)
            .ok_or_else(|| malformed("checksum flag without a checksum"))?;
    }
    let mut at = 4;
    let mut command: Option<Document> = None;
    let mut sequences: Vec<(String, Vec<Document>)> = Vec::new();
    while at < end {
        let kind = body[at];
        at += 1;
        match kind {
            0 => {
                let length = read_i32(body, at)? as usize;
                let bytes = body
                    .get(at..at + length)
                    .ok_or_else(|| malformed("kind-0 section past the end"))?;
                let document = Document::from_reader(bytes).map_err(|e| malformed(e.to_string()))?;
                if command.replace(document).is_some() {
                    return Err(malformed("more than one kind-0 section"));
                }
                at += length;
            }
            1 => {
                let size = read_i32(body, at)? as usize;
                let section_end = at + size;
                if size < 5 || section_end > end {
                    return Err(malformed("kind-1 section size"));
                }
                let mut cursor = at + 4;
                let nul = body[cursor..section_end]
                    .iter()
                    .position(|b| *b == 0)
                    .ok_or_else(|| malformed("kind-1 identifier without terminator"))?;
                let identifier = String::from_utf8(body[cursor..cursor + nul].to_vec())
                    .map_err(|_| malformed("kind-1 identifier is not UTF-8"))?;
                cursor += nul + 1;
                let mut documents = Vec::new();
                while cursor < section_end {
                    let length = read_i32(body, cursor)? as usize;
                    let bytes = body
                        .get(cursor..cursor + length)
                        .filter(|_| cursor + length <= section_end)
                        .ok_or_else(|| malformed("document past its kind-1 section"))?;
                    documents.push(Document::from_reader(bytes).map_err(|e| malformed(e.to_string()))?);
                    cursor += length;
                }
                sequences.push((identifier, documents));
                at = section_end;
            }
            other => return Err(malformed(format!("section kind {other}"))),
        }
    }
    let mut command = command.ok_or_else(|| malformed("no kind-0 section"))?;
    for (identifier, documents) in sequences {
        let mut all = match command.remove(&identifier) {
            Some(bson::Bson::Array(existing)) => existing,
            _ => Vec::new(),
        };
        all.extend(documents.into_iter().map(bson::Bson::Document));
        command.insert(identifier, all);
    }
    Ok((flags, command))
}

fn read_i32(bytes: &[u8], at: usize) -> Result<i32, WireError> {
    let slice = bytes
        .get(at..at + 4)
        .ok_or_else(|| malformed("length past the end"))?;
    let value = i32::from_le_bytes(slice.try_into().expect("4 bytes"));
    if value < 0 {
        return Err(malformed("negative length"));
    }
    Ok(value)
}

/// An OP_MSG with one kind-0 section and no flags.
pub fn encode(request_id: i32, response_to: i32, document: &Document) -> Vec<u8> {
    let mut payload = Vec::new();
    document
        .to_writer(&mut payload)
        .expect("a document always serializes");
    let length = 16 + 4 + 1 + payload.len();
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(&(length as i32).to_le_bytes());
    message.extend_from_slice(&request_id.to_le_bytes());
    message.extend_from_slice(&response_to.to_le_bytes());
    message.extend_from_slice(&OP_MSG.to_le_bytes());
    message.extend_from_slice(&0u32.to_le_bytes());
    message.push(0);
    message.extend_from_slice(&payload);
    message
}

pub async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    request_id: i32,
    response_to: i32,
    document: &Document,
) -> std::io::Result<()> {
    writer
        .write_all(&encode(request_id, response_to, document))
        .await?;
    writer.flush().await
}

/// Reads a reply to `request_id` (the sim's own member-to-member client).
pub async fn read_reply<R: AsyncRead + Unpin>(
    reader: &mut R,
    request_id: i32,
) -> Result<Document, WireError> {
    let mut header = [0u8; 16];
    match reader.read_exact(&mut header).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Err(WireError::Closed),
        Err(error) => return Err(error.into()),
    }
    let length = i32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let response_to = i32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
    let op_code = i32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    // Initial sync answers carry a whole data set, so no 16 MB document cap here.
    if length < 21 || op_code != OP_MSG {
        return Err(malformed(format!("reply length {length} opcode {op_code}")));
    }
    let mut body = vec![0u8; length as usize - 16];
    reader.read_exact(&mut body).await?;
    if response_to != request_id {
        return Err(malformed(format!(
            "reply to {response_to}, expected {request_id}"
        )));
    }
    Ok(parse_op_msg_body(&body)?.1)
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    /// An OP_MSG as the driver builds an `insert`: kind-0 body, kind-1 `documents`.
    fn insert_with_sequence(request_id: i32) -> Vec<u8> {
        let body = doc! { "insert": "things", "ordered": true, "$db": "app" };
        let documents = [doc! { "_id": 1, "a": "x" }, doc! { "_id": 2 }];
        let mut sections = vec![0u8];
        body.to_writer(&mut sections).unwrap();
        let mut sequence = Vec::new();
        for document in &documents {
            document.to_writer(&mut sequence).unwrap();
        }
        sections.push(1);
        let identifier = b"documents\0";
        sections.extend_from_slice(&((4 + identifier.len() + sequence.len()) as i32).to_le_bytes());
        sections.extend_from_slice(identifier);
        sections.extend_from_slice(&sequence);
        let length = 16 + 4 + sections.len();
        let mut message = Vec::new();
        message.extend_from_slice(&(length as i32).to_le_bytes());
        message.extend_from_slice(&request_id.to_le_bytes());
        message.extend_from_slice(&0i32.to_le_bytes());
        message.extend_from_slice(&OP_MSG.to_le_bytes());
        message.extend_from_slice(&0u32.to_le_bytes());
        message.extend_from_slice(&sections);
        message
    }

    #[tokio::test]
    async fn folds_document_sequences_into_the_command() {
        let bytes = insert_with_sequence(7);
        let request = read_request(&mut bytes.as_slice()).await.unwrap();
        assert_eq!(request.request_id, 7);
        assert!(request.wants_reply());
        assert_eq!(
            request.command,
            doc! {
                "insert": "things", "ordered": true, "$db": "app",
                "documents": [{ "_id": 1, "a": "x" }, { "_id": 2 }],
            }
        );
    }

    #[tokio::test]
    async fn replies_with_one_kind_zero_section_answering_the_request() {
        let reply = doc! { "ok": 1.0, "n": 2 };
        let bytes = encode(99, 7, &reply);
        assert_eq!(
            bytes.len() as i32,
            i32::from_le_bytes(bytes[0..4].try_into().unwrap())
        );
        assert_eq!(
            &bytes[16..21],
            &[0, 0, 0, 0, 0],
            "no flags, then a kind-0 section"
        );
        assert_eq!(read_reply(&mut bytes.as_slice(), 7).await.unwrap(), reply);
        assert!(read_reply(&mut bytes.as_slice(), 8).await.is_err());
    }

    #[tokio::test]
    async fn refuses_other_opcodes_truncation_and_a_missing_body() {
        let mut query = insert_with_sequence(1);
        query[12..16].copy_from_slice(&2004i32.to_le_bytes());
        assert!(matches!(
            read_request(&mut query.as_slice()).await,
            Err(WireError::Malformed(_))
        ));

        let whole = insert_with_sequence(1);
        let cut = &whole[..whole.len() - 3];
        assert!(read_request(&mut &cut[..]).await.is_err());

        assert!(matches!(read_request(&mut &[][..]).await, Err(WireError::Closed)));

        let only_sequence = {
            let mut body = 0u32.to_le_bytes().to_vec();
            body.push(1);
            body.extend_from_slice(&6i32.to_le_bytes());
            body.extend_from_slice(b"d\0");
            body
        };
        assert!(parse_op_msg_body(&only_sequence).is_err());
    }

    #[test]
    fn unacknowledged_requests_want_no_reply() {
        let mut body = MORE_TO_COME.to_le_bytes().to_vec();
        body.push(0);
        doc! { "insert": "x" }.to_writer(&mut body).unwrap();
        let (flags, command) = parse_op_msg_body(&body).unwrap();
        let request = Request {
            request_id: 1,
            flags,
            command,
        };
        assert!(!request.wants_reply());
    }
}
