//! GuideLLM's `--data-column-mapper
//! kind=generative_column_mapper,column_mappings.text_column=article` (its
//! README's dataset example) and a GuideLLM scenario's
//! `data_column_mapper`: each mapping becomes guidebench's column option
//! of every `--data` that has columns, and whatever cannot be honoured is
//! refused by name. GuideLLM's `kind=pooling_column_mapper` names the
//! column whose text embeddings and pooling requests send.

use std::path::Path;
use std::time::Duration;

use guidebench_bench::data::PreparedSource;
use guidebench_bench::scenario::{Flags, check_guidellm_pipeline};
use guidebench_bench::session::{Plan, Quiet, Session};
use guidebench_bench::{Error, Result};
use guidebench_core::request::RequestInput;
use guidebench_testkit as _;
use tokio::sync::watch;

/// The mock engine (instant, with the byte tokenizer).
const MOCK: &str = "kind=offline,engine=mock";
const README_MAPPER: &str = "kind=generative_column_mapper,column_mappings.text_column=article";

/// A JSONL file whose prompts are in `article` (as in the CNN/DailyMail
/// dataset of GuideLLM's README), with no column guidebench would take
/// for a prompt by default.
fn articles(dir: &Path) -> String {
    let path = dir.join("articles.jsonl");
    std::fs::write(
        &path,
        "{\"id\": 1, \"article\": \"first article\", \"highlights\": \"h1\", \"output_tokens\": 2}\n\
         {\"id\": 2, \"article\": \"second article\", \"highlights\": \"h2\", \"output_tokens\": 2}\n\
         {\"id\": 3, \"article\": \"third article\", \"highlights\": \"h3\", \"output_tokens\": 2}\n",
    )
    .expect("write");
    path.display().to_string()
}

/// A JSONL file of `question` prompts.
fn questions(dir: &Path) -> String {
    let path = dir.join("questions.jsonl");
    std::fs::write(
        &path,
        "{\"question\": \"why?\", \"output_tokens\": 2}\n\
         {\"question\": \"how?\", \"output_tokens\": 2}\n",
    )
    .expect("write");
    path.display().to_string()
}

/// The one plan of `flags` on the mock engine.
fn plan(flags: Flags) -> Result<Plan> {
    let mut run = flags.plan(MOCK)?;
    assert_eq!(run.plans.len(), 1);
    Plan::new(run.plans.remove(0))
}

/// The text prompts every `--data` of `plan` gives, in order.
fn prompts(plan: &Plan) -> Vec<String> {
    let mut texts = Vec::new();
    for data in &plan.data {
        let mut source = PreparedSource::new(data.args.clone(), data.on_error, plan.seed)
            .expect("data read")
            .source(None)
            .expect("source");
        while let Some(item) = source.next_item().expect("item") {
            match item.input {
                RequestInput::Text(text) => texts.push(text),
                other => panic!("not a text prompt: {other:?}"),
            }
        }
    }
    texts
}

fn refusal(flags: Flags) -> String {
    let err = plan(flags).expect_err("refused");
    assert!(err.is_usage(), "a usage error: {err}");
    err.to_string()
}

#[tokio::test]
async fn guidellms_readme_mapper_makes_the_article_column_the_prompts_of_the_requests() {
    let dir = tempfile::tempdir().expect("dir");
    let path = articles(dir.path());
    // Without the mapper the file has no prompt column.
    let plain = plan(Flags {
        data: vec![format!("kind=file,path={path}")],
        ..Flags::default()
    })
    .expect("plan");
    let data = &plain.data[0];
    let err = PreparedSource::new(data.args.clone(), data.on_error, plain.seed)
        .expect_err("no prompt column")
        .to_string();
    assert!(err.contains("article"), "lists the columns present: {err}");

    for data in [
        format!("kind=file,path={path}"),
        format!("kind=json_file,path={path}"),
        format!("{{\"kind\": \"file\", \"path\": \"{path}\"}}"),
    ] {
        let plan = plan(Flags {
            data: vec![data.clone()],
            data_column_mapper: Some(README_MAPPER.to_owned()),
            profile: Some("kind=synchronous".to_owned()),
            ..Flags::default()
        })
        .expect(&data);
        assert_eq!(plan.data[0].args.options["prompt_column"], "article");
        assert_eq!(
            prompts(&plan),
            ["first article", "second article", "third article"],
            "{data}"
        );
    }

    // The session sends one request per article.
    let plan = plan(Flags {
        data: vec![format!("kind=file,path={path}")],
        data_column_mapper: Some(README_MAPPER.to_owned()),
        profile: Some("kind=synchronous".to_owned()),
        ..Flags::default()
    })
    .expect("plan");
    let backend = plan.create_backend().expect("backend");
    let (_tx, cancel) = watch::channel(false);
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(backend, &mut Quiet, cancel),
    )
    .await
    .expect("in time")
    .expect("run");
    assert_eq!(report.benchmarks[0].metrics.successful.count, 3);
}

#[test]
fn each_guidellm_column_type_becomes_its_guidebench_column_option() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("rows.jsonl");
    std::fs::write(
        &path,
        "{\"body\": \"hi\", \"sys\": \"be brief\", \"n_in\": 1, \"n_out\": 3}\n",
    )
    .expect("write");
    let plan = plan(Flags {
        data: vec![format!("kind=file,path={}", path.display())],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.text_column=body,\
             column_mappings.prefix_column=sys,column_mappings.prompt_tokens_count_column=n_in,\
             column_mappings.output_tokens_count_column=[\"n_out\"]"
                .to_owned(),
        ),
        ..Flags::default()
    })
    .expect("plan");
    let options = &plan.data[0].args.options;
    for (option, column) in [
        ("prompt_column", "body"),
        ("system_column", "sys"),
        ("prompt_tokens_column", "n_in"),
        ("output_tokens_column", "n_out"),
    ] {
        assert_eq!(options[option], column, "{option}");
    }
    // The media types too (the plan before the file is read: it has no
    // such columns).
    let run = Flags {
        data: vec![format!("kind=file,path={}", path.display())],
        data_column_mapper: Some(
            "{\"kind\": \"generative_column_mapper\", \"column_mappings\": \
             {\"image_column\": \"pic\", \"audio_column\": \"wav\", \
             \"tools_column\": \"fns\", \"tool_choice_column\": \"choice\", \
             \"tool_response_column\": \"result\"}}"
                .to_owned(),
        ),
        ..Flags::default()
    }
    .plan(MOCK)
    .expect("plans");
    let data = &run.plans[0].data;
    assert!(data[0].contains("\"image_column\":\"pic\""), "{data:?}");
    assert!(data[0].contains("\"audio_column\":\"wav\""), "{data:?}");
    // And the tool columns GuideLLM reads tool calling from.
    for (option, column) in [
        ("tools_column", "fns"),
        ("tool_choice_column", "choice"),
        ("tool_response_column", "result"),
    ] {
        assert!(
            data[0].contains(&format!("\"{option}\":\"{column}\"")),
            "{option}: {data:?}"
        );
    }
}

#[test]
fn a_mapping_that_differs_from_the_option_given_on_data_is_refused_naming_both() {
    let dir = tempfile::tempdir().expect("dir");
    let path = articles(dir.path());
    let err = refusal(Flags {
        data: vec![format!("kind=file,path={path},prompt_column=highlights")],
        data_column_mapper: Some(README_MAPPER.to_owned()),
        ..Flags::default()
    });
    assert!(
        err.contains("column_mappings.text_column=article")
            && err.contains("prompt_column=highlights"),
        "{err}"
    );
    // GuideLLM's own name of the option on --data is the same option.
    let err = refusal(Flags {
        data: vec![format!(
            "kind=json_file,path={path},output_tokens_count_column=id"
        )],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.output_tokens_count_column=output_tokens"
                .to_owned(),
        ),
        ..Flags::default()
    });
    assert!(
        err.contains("output_tokens_count_column=output_tokens")
            && err.contains("output_tokens_column=id"),
        "{err}"
    );
    // The same column twice is no conflict.
    let plan = plan(Flags {
        data: vec![format!("kind=file,path={path},prompt_column=article")],
        data_column_mapper: Some(README_MAPPER.to_owned()),
        ..Flags::default()
    })
    .expect("the same column");
    assert_eq!(prompts(&plan).len(), 3);
    // Two GuideLLM types that become one option.
    let err = refusal(Flags {
        data: vec![format!("kind=file,path={path}")],
        data_column_mapper: Some(format!(
            "{README_MAPPER},column_mappings.raw_messages_column=messages"
        )),
        ..Flags::default()
    });
    assert!(
        err.contains("column_mappings.raw_messages_column") && err.contains("prompt_column"),
        "{err}"
    );
}

#[test]
fn an_unknown_column_type_is_refused_listing_guidellms_and_one_without_equal_says_why() {
    let dir = tempfile::tempdir().expect("dir");
    let path = articles(dir.path());
    let flags = |mapper: &str| Flags {
        data: vec![format!("kind=file,path={path}")],
        data_column_mapper: Some(mapper.to_owned()),
        ..Flags::default()
    };
    let err = refusal(flags(
        "kind=generative_column_mapper,column_mappings.body_column=article",
    ));
    assert!(err.contains("`column_mappings.body_column`"), "{err}");
    for known in [
        "text_column",
        "prefix_column",
        "prompt_tokens_count_column",
        "output_tokens_count_column",
        "image_column",
        "audio_column",
        "video_column",
    ] {
        assert!(err.contains(known), "lists {known}: {err}");
    }
    let err = refusal(flags(
        "kind=generative_column_mapper,column_mappings.video_column=clip",
    ));
    assert!(
        err.contains("column_mappings.video_column") && err.contains("no video"),
        "{err}"
    );
    let err = refusal(flags(
        "kind=generative_column_mapper,column_mappings.turn_type_column=kind",
    ));
    assert!(err.contains("follow from its tools column"), "{err}");
    // Another option of the mapper, or another kind.
    let err = refusal(flags("kind=generative_column_mapper,columns.text=article"));
    assert!(err.contains("unknown option `columns`"), "{err}");
    let err = refusal(flags("kind=pooled_column_mapper"));
    assert!(
        err.contains("kind=generative_column_mapper") && err.contains("kind=pooling_column_mapper"),
        "{err}"
    );
    // The CLI's check refuses the same, with what to write.
    let err = check_guidellm_pipeline(&[("--data-column-mapper", &["kind=mine".to_owned()])])
        .expect_err("unknown kind");
    assert!(
        err.is_usage() && err.to_string().contains("prompt_column="),
        "{err}"
    );
    check_guidellm_pipeline(&[("--data-column-mapper", &[README_MAPPER.to_owned()])])
        .expect("the README's mapper");
    // The other pipeline flags are still refused off their defaults.
    let err = check_guidellm_pipeline(&[("--data-loader", &["kind=custom".to_owned()])])
        .expect_err("custom loader");
    assert!(err.to_string().contains("kind=pytorch"), "{err}");
}

#[test]
fn a_mapping_for_data_without_columns_is_refused_as_guidellm_stops_there_too() {
    let synthetic = "kind=synthetic_text,prompt_tokens=8,output_tokens=4";
    let err = refusal(Flags {
        data: vec![synthetic.to_owned()],
        data_column_mapper: Some(README_MAPPER.to_owned()),
        ..Flags::default()
    });
    assert!(
        err.contains("kind=synthetic_text") && err.contains("no columns"),
        "{err}"
    );
    let err = refusal(Flags {
        data_column_mapper: Some(README_MAPPER.to_owned()),
        ..Flags::default()
    });
    assert!(err.contains("none is given"), "{err}");
    // Named for the file alone, the synthetic data beside it is left be.
    let dir = tempfile::tempdir().expect("dir");
    let path = articles(dir.path());
    let run = Flags {
        data: vec![format!("kind=file,path={path}"), synthetic.to_owned()],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.text_column=0.article".to_owned(),
        ),
        ..Flags::default()
    }
    .plan(MOCK)
    .expect("plans");
    assert_eq!(run.plans[0].data[1], synthetic);
    // The default mapper, bare or without mappings, changes nothing.
    for mapper in [
        "kind=generative_column_mapper",
        "{\"kind\": \"generative_column_mapper\", \"column_mappings\": null}",
    ] {
        let run = Flags {
            data: vec![synthetic.to_owned()],
            data_column_mapper: Some(mapper.to_owned()),
            ..Flags::default()
        }
        .plan(MOCK)
        .expect(mapper);
        assert_eq!(run.plans[0].data, [synthetic]);
    }
}

#[test]
fn a_list_of_columns_gives_each_data_its_own_and_two_for_one_data_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let a = articles(dir.path());
    let q = questions(dir.path());
    let plan = plan(Flags {
        data: vec![format!("kind=file,path={a}"), format!("kind=file,path={q}")],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.text_column=0.article,1.question"
                .to_owned(),
        ),
        ..Flags::default()
    })
    .expect("plan");
    assert_eq!(
        prompts(&plan),
        [
            "first article",
            "second article",
            "third article",
            "why?",
            "how?"
        ]
    );
    let err = refusal(Flags {
        data: vec![format!("kind=file,path={a}")],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.text_column=article,question".to_owned(),
        ),
        ..Flags::default()
    });
    assert!(
        err.contains("article, question") && err.contains("one"),
        "{err}"
    );
    let err = refusal(Flags {
        data: vec![format!("kind=file,path={a}")],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.text_column=2.article".to_owned(),
        ),
        ..Flags::default()
    });
    assert!(err.contains("--data 2"), "{err}");
}

#[test]
fn a_guidellm_scenarios_data_column_mapper_maps_its_data_and_that_of_data_flags() {
    let dir = tempfile::tempdir().expect("dir");
    let a = articles(dir.path());
    let scenario = dir.path().join("guidellm.yaml");
    std::fs::write(
        &scenario,
        format!(
            "spec:\n  data:\n    - kind: json_file\n      path: {a}\n  data_column_mapper:\n    \
             kind: generative_column_mapper\n    column_mappings:\n      text_column: [article]\n"
        ),
    )
    .expect("write");
    let from_file = plan(Flags {
        scenario: Some(scenario.clone()),
        ..Flags::default()
    })
    .expect("plan");
    assert_eq!(
        prompts(&from_file),
        ["first article", "second article", "third article"]
    );
    // `--data` wins over the file's data; the file's mapper still maps it.
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, "{\"article\": \"flagged\", \"output_tokens\": 2}\n").expect("write");
    let flagged = plan(Flags {
        scenario: Some(scenario.clone()),
        data: vec![format!("kind=file,path={}", other.display())],
        ..Flags::default()
    })
    .expect("plan");
    assert_eq!(prompts(&flagged), ["flagged"]);
    // And `--data-column-mapper` wins over the file's mapper.
    let q = questions(dir.path());
    let flagged = plan(Flags {
        scenario: Some(scenario),
        data: vec![format!("kind=file,path={q}")],
        data_column_mapper: Some(
            "kind=generative_column_mapper,column_mappings.text_column=question".to_owned(),
        ),
        ..Flags::default()
    })
    .expect("plan");
    assert_eq!(prompts(&flagged), ["why?", "how?"]);

    // A mapping the file cannot have is named by its path in the file.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        format!(
            r#"{{"spec": {{"data": [{{"kind": "file", "path": "{a}"}}],
                "data_column_mapper": {{"kind": "generative_column_mapper",
                    "column_mappings": {{"video_column": "clip"}}}}}}}}"#
        ),
    )
    .expect("write");
    let err = plan(Flags {
        scenario: Some(bad),
        ..Flags::default()
    })
    .expect_err("refused");
    assert!(matches!(err, Error::GuideLlm { .. }), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("`spec.data_column_mapper`") && err.contains("video_column"),
        "{err}"
    );
}

/// `openai_http` sending embeddings (nothing is sent in these tests).
const EMBEDDINGS: &str = "kind=openai_http,target=http://127.0.0.1:9,model=m,\
                          request_format=/v1/embeddings";

/// A JSONL file whose texts to embed are in `passage`, beside a `prompt`
/// and a `question` column of other texts.
fn passages(dir: &Path) -> String {
    let path = dir.join("passages.jsonl");
    std::fs::write(
        &path,
        "{\"question\": \"q1\", \"passage\": \"first passage\", \"prompt\": \"p1\"}\n\
         {\"question\": \"q2\", \"passage\": \"second passage\", \"prompt\": \"p2\"}\n",
    )
    .expect("write");
    path.display().to_string()
}

/// The flags of an embeddings run of `path` through `mapper`.
fn pooled(path: &str, mapper: &str, backend: &str) -> Flags {
    Flags {
        backend: vec![backend.to_owned()],
        data: vec![format!("kind=file,path={path}")],
        data_column_mapper: Some(mapper.to_owned()),
        ..Flags::default()
    }
}

#[test]
fn the_pooling_mappers_pooling_column_becomes_the_input_of_the_embeddings_requests() {
    let dir = tempfile::tempdir().expect("dir");
    let path = passages(dir.path());
    for (mapper, format) in [
        (
            "kind=pooling_column_mapper,column_mappings.pooling_column=passage",
            "/v1/embeddings",
        ),
        (
            "{\"kind\": \"pooling_column_mapper\", \"column_mappings\": {\"pooling_column\": [\"passage\"]}}",
            "embeddings",
        ),
        (
            "kind=pooling_column_mapper,column_mappings.pooling_column=0.passage",
            "/pooling",
        ),
        (
            "kind=pooling_column_mapper,column_mappings.pooling_column=passage",
            "pooling",
        ),
    ] {
        let backend = EMBEDDINGS.replace("/v1/embeddings", format);
        let plan = plan(pooled(&path, mapper, &backend)).expect(mapper);
        assert_eq!(plan.data[0].args.options["prompt_column"], "passage");
        assert_eq!(
            prompts(&plan),
            ["first passage", "second passage"],
            "{mapper} {format}"
        );
    }
    // A mapped column the file lacks is named with the columns present.
    let plan = plan(pooled(
        &path,
        "kind=pooling_column_mapper,column_mappings.pooling_column=body",
        EMBEDDINGS,
    ))
    .expect("plan");
    let data = &plan.data[0];
    let err = PreparedSource::new(data.args.clone(), data.on_error, plan.seed)
        .expect_err("no body column")
        .to_string();
    assert!(err.contains("`body`") && err.contains("passage"), "{err}");
}

#[test]
fn the_pooling_mappers_default_finds_the_prompt_column_and_yields_to_one_named_on_data() {
    let dir = tempfile::tempdir().expect("dir");
    let path = passages(dir.path());
    // GuideLLM's generative default would take `question`, the first of
    // its names in the file; the pooling mapper's default is `prompt`.
    for mapper in [
        "kind=pooling_column_mapper",
        "{\"kind\": \"pooling_column_mapper\", \"column_mappings\": null}",
        "{\"kind\": \"pooling_column_mapper\", \"column_mappings\": {}}",
    ] {
        let plan = plan(pooled(&path, mapper, EMBEDDINGS)).expect(mapper);
        assert_eq!(prompts(&plan), ["p1", "p2"], "{mapper}");
    }
    // A prompt column named on --data wins over the default.
    let named = plan(Flags {
        data: vec![format!("kind=file,path={path},prompt_column=passage")],
        ..pooled(&path, "kind=pooling_column_mapper", EMBEDDINGS)
    })
    .expect("plan");
    assert_eq!(prompts(&named), ["first passage", "second passage"]);
    // Without a `prompt` column it is named, with the columns present.
    let q = questions(dir.path());
    let without = plan(pooled(&q, "kind=pooling_column_mapper", EMBEDDINGS)).expect("plan");
    let data = &without.data[0];
    let err = PreparedSource::new(data.args.clone(), data.on_error, without.seed)
        .expect_err("no prompt column")
        .to_string();
    assert!(
        err.contains("`prompt`") && err.contains("question"),
        "{err}"
    );
    // Synthetic data has no columns: GuideLLM's default finds none and
    // stops, and so does guidebench's.
    let err = refusal(Flags {
        data: vec!["kind=synthetic_text,prompt_tokens=8,output_tokens=4".to_owned()],
        ..pooled(&path, "kind=pooling_column_mapper", EMBEDDINGS)
    });
    assert!(
        err.contains("default column_mappings.pooling_column=prompt") && err.contains("no columns"),
        "{err}"
    );
}

#[test]
fn a_column_type_the_pooling_mapper_does_not_take_is_refused_naming_the_types_it_takes() {
    let dir = tempfile::tempdir().expect("dir");
    let path = passages(dir.path());
    for (mapper, generative) in [
        (
            "kind=pooling_column_mapper,column_mappings.text_column=passage",
            true,
        ),
        (
            "kind=pooling_column_mapper,column_mappings.passage_column=passage",
            false,
        ),
        (
            "kind=pooling_column_mapper,column_mappings.pooling_column=passage,\
             column_mappings.prompt_tokens_count_column=n",
            true,
        ),
    ] {
        let err = refusal(pooled(&path, mapper, EMBEDDINGS));
        assert!(
            err.contains("is not kind=pooling_column_mapper's")
                && err.contains("it takes pooling_column"),
            "{mapper}: {err}"
        );
        assert_eq!(
            err.contains("is kind=generative_column_mapper's"),
            generative,
            "{mapper}: {err}"
        );
    }
    // The generative mapper does not take the pooling type either.
    let err = refusal(pooled(
        &path,
        "kind=generative_column_mapper,column_mappings.pooling_column=passage",
        EMBEDDINGS,
    ));
    assert!(
        err.contains("`column_mappings.pooling_column`") && err.contains("text_column"),
        "{err}"
    );
    let err = refusal(pooled(
        &path,
        "kind=pooling_column_mapper,columns.pooling=passage",
        EMBEDDINGS,
    ));
    assert!(
        err.contains("unknown option `columns`") && err.contains("kind=pooling_column_mapper"),
        "{err}"
    );
}

#[test]
fn the_pooling_mapper_with_a_generation_request_format_is_refused_as_guidellm_fails_each_request() {
    let dir = tempfile::tempdir().expect("dir");
    let path = passages(dir.path());
    let mapper = "kind=pooling_column_mapper,column_mappings.pooling_column=passage";
    for (backend, named) in [
        (
            "kind=openai_http,target=http://127.0.0.1:9,model=m",
            "request_format=chat (its default)",
        ),
        (
            "kind=openai_http,target=http://127.0.0.1:9,request_format=/v1/chat/completions",
            "request_format=/v1/chat/completions",
        ),
        (
            "kind=openai_http,target=http://127.0.0.1:9,request_format=text",
            "request_format=text",
        ),
        (MOCK, "the backend, kind=offline,"),
    ] {
        let err = refusal(pooled(&path, mapper, backend));
        assert!(
            err.contains(named)
                && err.contains("request_format=/v1/embeddings or /pooling")
                && err.contains("kind=generative_column_mapper"),
            "{backend}: {err}"
        );
    }
    // The CLI's check reads the mapper alone: the backend is checked with
    // the plan.
    check_guidellm_pipeline(&[("--data-column-mapper", &[mapper.to_owned()])])
        .expect("the pooling mapper");
}

#[test]
fn a_guidellm_scenario_with_a_pooling_column_mapper_embeds_its_mapped_column() {
    let dir = tempfile::tempdir().expect("dir");
    let path = passages(dir.path());
    let scenario = dir.path().join("guidellm.yaml");
    let write = |mapper: &str| {
        std::fs::write(
            &scenario,
            format!(
                "spec:\n  backend:\n    kind: openai_http\n    target: http://127.0.0.1:9\n    \
                 model: m\n    request_format: /v1/embeddings\n  data:\n    - kind: json_file\n      \
                 path: {path}\n  data_column_mapper:\n{mapper}"
            ),
        )
        .expect("write");
    };
    let from_file = || {
        let mut run = Flags {
            scenario: Some(scenario.clone()),
            ..Flags::default()
        }
        .plan(MOCK)?;
        Plan::new(run.plans.remove(0))
    };
    write("    kind: pooling_column_mapper\n    column_mappings:\n      pooling_column: passage\n");
    let plan = from_file().expect("plan");
    assert_eq!(plan.backend.kind, "openai_http");
    assert_eq!(prompts(&plan), ["first passage", "second passage"]);
    write("    kind: pooling_column_mapper\n");
    assert_eq!(prompts(&from_file().expect("plan")), ["p1", "p2"]);
    // A type the mapper does not take is named by its path in the file.
    write("    kind: pooling_column_mapper\n    column_mappings:\n      text_column: passage\n");
    let err = from_file().expect_err("refused");
    assert!(matches!(err, Error::GuideLlm { .. }), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("`spec.data_column_mapper`") && err.contains("it takes pooling_column"),
        "{err}"
    );
}
