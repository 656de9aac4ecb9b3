//! The answer to a job's question (`waiting_human: ask`): the asking job ends `succeeded` (it
//! did its part), and a follow-up job is queued that resumes in the asking movement with the
//! question and the answer; the interjections the asking job never read move to it.

use maestro_db::comments::Said;
use maestro_db::jobs::NextJob;
use maestro_db::{DbError, PgPool, actions, comments, events, jobs};
use maestro_domain::{
    ActionDetail, Comment, CommentKind, Decision, DecisionEvent, EventBody, JobId, JobStateChange,
    JobStatus, TaskId, Verdict,
};
use maestro_messaging::AfterCommit;

/// An answered question: the answer (a comment of the follow-up job) and what follows.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub comment: Comment,
    pub after: AfterCommit,
}

/// Answer the question the task's latest job asked with what `said` says; the follow-up job is
/// `new_job`. `None` when the latest job does not wait for an answer (nothing written).
pub async fn answer(
    pool: &PgPool,
    task_id: TaskId,
    said: Said<'_>,
    new_job: JobId,
    max_attempts: i32,
) -> Result<Option<Answered>, DbError> {
    let mut tx = maestro_db::begin(pool).await?;
    let Some(asking) = jobs::lock_asking(&mut tx, task_id).await? else {
        return Ok(None);
    };
    let decision = Decision {
        answered_by_job: Some(new_job),
        ..Decision::new(Verdict::Answer, said.author.as_str())
    };
    // Waiting for an answer without a question on record: fail closed.
    let Some(question) = actions::pending_question(&mut tx, asking.id).await? else {
        return Ok(None);
    };
    let ask = actions::store_decision(&mut tx, question, &decision).await?;
    let question = match &ask.detail {
        ActionDetail::Ask { question } => question.as_str(),
        _ => "",
    };
    let result = format!(
        "asked the user; job {} continues with the answer",
        asking.job_no + 1
    );
    jobs::settle(&mut tx, asking.id, JobStatus::Succeeded, &result).await?;
    let mut done = JobStateChange::new(JobStatus::Succeeded, asking.attempt);
    done.result = Some(result);
    done.followed_by = Some(new_job);
    let decided = DecisionEvent::new(ask.id, ask.kind(), &decision, JobStatus::Succeeded);
    let ended = [EventBody::Decision(decided), EventBody::JobState(done)];
    events::push(&mut tx, asking.id, &ended).await?;
    let next = NextJob {
        id: new_job,
        task_id,
        max_attempts,
        resume_movement: Some(&ask.movement),
        resume_question: Some(question),
        ask_count: asking.ask_count + 1,
    };
    let (_, profile) = jobs::insert_next(&mut tx, &next).await?;
    let queued = EventBody::JobState(JobStateChange::new(JobStatus::Queued, 0));
    events::push(&mut tx, new_job, &[queued]).await?;
    comments::move_unread(&mut tx, asking.id, new_job).await?;
    let comment = comments::insert(&mut tx, task_id, new_job, CommentKind::Answer, said).await?;
    maestro_db::commit(tx).await?;
    Ok(Some(Answered {
        comment,
        after: AfterCommit::new_job(&profile, task_id, new_job),
    }))
}
